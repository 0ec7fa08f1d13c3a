;;; passepartout-journals-tests.el --- ERT tests: old sessions removed by the journals' quota  -*- lexical-binding: t; -*-

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

;; When a new session takes the session journals past their quota
;; (`[sessions]' in config.toml), the daemon removes the oldest and says
;; so with `_passepartout/sessions/pruned'; Emacs shows the daemon's line
;; in the echo area (and so in *Messages*).  Against the real daemon.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)

(ert-deftest passepartout-journals-test-removed-sessions-are-shown ()
  "A session past the journals' quota shows which old session it removed."
  (passepartout-test-with-daemon nil
    (let ((config (expand-file-name ".config/passepartout/config.toml" home))
          (old (expand-file-name "sessions/20200101T000000-1-1.jsonl" state)))
      (make-directory (file-name-directory config) t)
      (with-temp-file config
        (insert "[sessions]\nmax_journals = 1\nkeep_newest = 0\n"))
      (make-directory (file-name-directory old) t)
      (with-temp-file old (insert "{}\n"))
      (with-current-buffer (get-buffer-create "*Messages*")
        (let ((inhibit-read-only t)) (erase-buffer)))
      (with-current-buffer (passepartout-test--chat project)
        (passepartout-chat--ensure-session))
      (passepartout-test--wait-for
       (with-current-buffer "*Messages*"
         (string-match-p "passepartout: the session journals in .* passed their quota: removed the oldest: 20200101T000000-1-1 (3 B)"
                         (buffer-string)))
       10 "the removal shown in the echo area")
      (should-not (file-exists-p old)))))

(provide 'passepartout-journals-tests)
;;; passepartout-journals-tests.el ends here
