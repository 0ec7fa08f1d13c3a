;;; passepartout-modes-tests.el --- ERT tests: session modes, slash commands  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The passepartout authors

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; Against the real daemon and fake provider: switching a chat to the
;; read-only mode shows in the mode line (from the daemon's
;; `current_mode_update') and makes a write tool be denied; the slash
;; commands the daemon announces complete at the prompt.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)

(ert-deftest passepartout-modes-test-read-only-denies-a-write ()
  "In read-only mode the mode line says so and write_file is denied."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_w" "write_file"
                                           '(:path "out.txt" :content "hello"))
            (passepartout-test--text-reply "Could not write."))
    (let ((chat (passepartout-test--chat project)))
      (with-current-buffer chat
        (passepartout-chat--ensure-session)
        (should (equal (plist-get passepartout-chat--modes :currentModeId) "auto"))
        (let ((inhibit-message t))
          (passepartout-set-mode "read-only"))
        (should (string-match-p "\\[[a-z]+ read-only"
                                (passepartout-chat--mode-line))))
      (passepartout-test--send chat "Write out.txt")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should-not (file-exists-p (expand-file-name "out.txt" project)))
      (let ((tool (cl-loop for m across (plist-get (plist-get (nth 1 (passepartout-test--requests))
                                                              :body)
                                                   :messages)
                           when (equal (plist-get m :role) "tool")
                           return (plist-get m :content))))
        (should (string-match-p "the session is in read-only mode" tool))))))

(ert-deftest passepartout-modes-test-slash-commands-complete ()
  "The commands announced by the daemon complete after `/' in the prompt."
  (passepartout-test-with-daemon nil
    (let ((chat (passepartout-test--chat project)))
      (with-current-buffer chat
        (passepartout-chat--ensure-session)
        (passepartout-test--wait-for passepartout-chat--commands 20
          "available_commands_update")
        (goto-char (point-max))
        (insert "/rev")
        (let ((capf (passepartout-chat--command-capf)))
          (should capf)
          (should (equal (all-completions "rev" (nth 2 capf)) '("review")))
          (should (equal (buffer-substring-no-properties (nth 0 capf) (nth 1 capf))
                         "rev")))
        ;; Not a command in the middle of a sentence.
        (insert " and /exp")
        (should-not (passepartout-chat--command-capf))
        (set-buffer-modified-p nil)))))

(provide 'passepartout-modes-tests)
;;; passepartout-modes-tests.el ends here
