;;; passepartout-history-tests.el --- ERT tests of checkpoint history and undo  -*- lexical-binding: t; -*-

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

;; Against the real daemon and the fake provider: an agent's shell action
;; changes the project; `passepartout-history' lists the checkpoint with its
;; effect; `passepartout-undo' reverts it, and refuses (changing nothing)
;; when the file changed since.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)
(require 'passepartout-history)

(defun passepartout-history-test--run-to-idle (chat)
  "Wait until CHAT's turn ends, approving any flight plan on the way."
  (passepartout-test--wait-for
      (progn
        (maphash (lambda (id entry)
                   (when (equal (plist-get entry :status) "pending")
                     (with-current-buffer (passepartout-plan-buffer id)
                       (passepartout-plan-approve))))
                 passepartout-plan--plans)
        (passepartout-test--idle-p chat))
    60 "the end of the turn"))

(defvar passepartout-history-test--questions nil
  "The questions asked by the last `passepartout-history-test--saying-yes'.")

(defmacro passepartout-history-test--saying-yes (&rest body)
  "Run BODY answering yes to every yes-or-no question; record them."
  (declare (indent 0))
  `(progn
     (setq passepartout-history-test--questions nil)
     (cl-letf (((symbol-function 'yes-or-no-p)
                (lambda (q) (push q passepartout-history-test--questions) t)))
       ,@body)))

(defun passepartout-history-test--file (project name)
  "The contents of NAME in PROJECT, or nil when it does not exist."
  (let ((file (expand-file-name name project)))
    (when (file-exists-p file)
      (with-temp-buffer
        (insert-file-contents-literally file)
        (buffer-string)))))

(ert-deftest passepartout-history-test-list-and-undo ()
  "An agent's change is listed with its effect and undone from the history buffer."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_w" "shell" '(:command "printf 'agent wrote this\\n' > notes.txt"))
            (passepartout-test--text-reply "Written."))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Write notes.txt")
      (passepartout-history-test--run-to-idle chat)
      (should (equal (passepartout-history-test--file project "notes.txt")
                     "agent wrote this\n"))
      (let ((history (passepartout-history project)))
        (with-current-buffer history
          (should (eq major-mode 'passepartout-history-mode))
          (goto-char (point-min))
          (should (equal (tabulated-list-get-id) "c1"))
          (let ((row (tabulated-list-get-entry)))
            (should (equal (aref row 1) "applied"))
            (should (equal (aref row 2) "shell"))
            (should (string-match-p "changed 1 file: \\+1 ~0 −0" (aref row 5))))
          ;; `u' on the row undoes it.
          (should (eq (key-binding (kbd "u")) #'passepartout-undo))
          (let ((result (passepartout-history-test--saying-yes
                         (call-interactively #'passepartout-undo))))
            (should (equal (plist-get result :undone) "c1")))
          (should-not (passepartout-history-test--file project "notes.txt"))
          ;; The listing was refreshed: the undo is c2, c1 is undone.
          (goto-char (point-min))
          (should (equal (tabulated-list-get-id) "c2"))
          (should (string-match-p "(undoes c1)" (aref (tabulated-list-get-entry) 5)))
          (forward-line 1)
          (should (equal (aref (tabulated-list-get-entry) 1) "undone")))))))

(ert-deftest passepartout-history-test-undo-refuses-when-files-changed ()
  "Undo refuses with the daemon's reason, and changes nothing, when the file was edited since."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_w" "shell" '(:command "printf 'agent\\n' > notes.txt"))
            (passepartout-test--text-reply "Written."))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Write notes.txt")
      (passepartout-history-test--run-to-idle chat)
      (with-temp-file (expand-file-name "notes.txt" project)
        (insert "edited by the person\n"))
      (let ((err (should-error (passepartout-undo nil project) :type 'user-error)))
        (should (string-match-p "changed since" (cadr err)))
        (should (string-match-p "notes.txt" (cadr err))))
      (should (equal (passepartout-history-test--file project "notes.txt")
                     "edited by the person\n"))
      ;; Nothing to undo is said plainly too.
      (let ((err (should-error (passepartout-undo "c99" project) :type 'user-error)))
        (should (string-match-p "no checkpoint `c99`" (cadr err)))))))

(ert-deftest passepartout-history-test-undo-turn ()
  "Two calls of one turn are undone together with `U' in the history buffer."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_a" "shell" '(:command "printf 'one\\n' > a.txt"))
            (passepartout-test--tool-reply
             "call_b" "shell" '(:command "printf 'two\\n' > b.txt"))
            (passepartout-test--text-reply "Written."))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Write two files")
      (passepartout-history-test--run-to-idle chat)
      (should (equal (passepartout-history-test--file project "b.txt") "two\n"))
      (with-current-buffer (passepartout-history project)
        (goto-char (point-min))
        (let ((turn (aref (tabulated-list-get-entry) 4)))
          (should (string-prefix-p "t" turn))
          (forward-line 1)
          (should (equal (aref (tabulated-list-get-entry) 4) turn))
          (should (eq (key-binding (kbd "U")) #'passepartout-undo-turn))
          (let ((result (passepartout-history-test--saying-yes
                         (call-interactively #'passepartout-undo-turn))))
            (should (equal (plist-get result :turn) turn))
            (should (equal (plist-get result :undone) "c2,c1")))))
      (should-not (passepartout-history-test--file project "a.txt"))
      (should-not (passepartout-history-test--file project "b.txt")))))

;;;; Issue 18, item 10

(ert-deftest passepartout-history-test-undo-asks-and-reverts-buffers ()
  "`u' asks first, and a buffer visiting the file shows it as restored (issue 18, item 10)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_w" "shell" '(:command "printf 'agent wrote this\\n' > notes.txt"))
            (passepartout-test--text-reply "Written."))
    (with-temp-file (expand-file-name "notes.txt" project)
      (insert "mine\n"))
    (let ((chat (passepartout-test--chat project))
          (notes (find-file-noselect (expand-file-name "notes.txt" project))))
      (unwind-protect
          (progn
            (passepartout-test--send chat "Write notes.txt")
            (passepartout-history-test--run-to-idle chat)
            (with-current-buffer notes
              (revert-buffer t t t)
              (should (equal (buffer-string) "agent wrote this\n")))
            (with-current-buffer (passepartout-history project)
              (goto-char (point-min))
              (should (equal (tabulated-list-get-id) "c1"))
              ;; A no changes nothing.
              (let (asked)
                (cl-letf (((symbol-function 'yes-or-no-p)
                           (lambda (q) (setq asked q) nil)))
                  (should-error (call-interactively #'passepartout-undo) :type 'user-error))
                (should (string-match-p "Undo checkpoint c1" asked)))
              (should (equal (passepartout-history-test--file project "notes.txt")
                             "agent wrote this\n"))
              ;; A yes undoes, and the visiting buffer follows the disk.
              (goto-char (point-min))
              (passepartout-history-test--saying-yes
                (call-interactively #'passepartout-undo))
              (should (= (length passepartout-history-test--questions) 1)))
            (should (equal (passepartout-history-test--file project "notes.txt") "mine\n"))
            (with-current-buffer notes
              (should (equal (buffer-string) "mine\n"))
              (should-not (buffer-modified-p))
              (should (verify-visited-file-modtime notes))))
        (kill-buffer notes)))))

(ert-deftest passepartout-history-test-undo-from-a-chat-is-the-chats-own ()
  "`passepartout-undo' in a chat undoes that chat's change, never another chat's.
Chat A writes a.txt; a new chat B in the same project writes b.txt.  From
B, the first undo takes b.txt and names it; the second is refused, naming
A's change, and leaves a.txt alone."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_a" "shell" '(:command "printf 'from A\\n' > a.txt"))
            (passepartout-test--text-reply "Written.")
            (passepartout-test--tool-reply
             "call_b" "shell" '(:command "printf 'from B\\n' > b.txt"))
            (passepartout-test--text-reply "Written."))
    (let ((a (passepartout-test--chat project)))
      (passepartout-test--send a "Write a.txt")
      (passepartout-history-test--run-to-idle a)
      (let ((a-session (buffer-local-value 'passepartout-chat--session-id a)))
        (kill-buffer a)
        (let ((b (passepartout-test--chat project)))
          (should-not (equal (buffer-local-value 'passepartout-chat--session-id b)
                             a-session))
          (passepartout-test--send b "Write b.txt")
          (passepartout-history-test--run-to-idle b)
          (should (equal (passepartout-history-test--file project "b.txt") "from B\n"))
          (with-current-buffer b
            (let ((result (passepartout-history-test--saying-yes
                            (call-interactively #'passepartout-undo))))
              (should (string-match-p "this chat's last change"
                                      (car passepartout-history-test--questions)))
              (should (equal (plist-get result :undone) "c2"))
              (should (equal (plist-get result :tool) "shell")))
            (should-not (passepartout-history-test--file project "b.txt"))
            ;; B has nothing left: refused, naming A's c1, which stays.
            (let ((err (should-error (passepartout-undo nil nil) :type 'user-error)))
              (should (string-match-p "this session has no change to undo" (cadr err)))
              (should (string-match-p "c1" (cadr err)))
              (should (string-match-p (regexp-quote a-session) (cadr err)))))
          (should (equal (passepartout-history-test--file project "a.txt")
                         "from A\n")))))))

(ert-deftest passepartout-history-test-undo-turn-from-a-chat-is-the-chats-own ()
  "`passepartout-undo-turn' in a chat undoes that chat's last turn only.
Chat A writes a.txt; a new chat B in the same project reads it (no
change).  From B, the last turn is refused (B has none that changed the
project) and a.txt stays; once B writes b.txt, B's undo takes that turn."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_a" "shell" '(:command "printf 'from A\\n' > a.txt"))
            (passepartout-test--text-reply "Written.")
            (passepartout-test--tool-reply "call_r" "shell" '(:command "cat a.txt"))
            (passepartout-test--text-reply "Read.")
            (passepartout-test--tool-reply
             "call_b" "shell" '(:command "printf 'from B\\n' > b.txt"))
            (passepartout-test--text-reply "Written."))
    (let ((a (passepartout-test--chat project)))
      (passepartout-test--send a "Write a.txt")
      (passepartout-history-test--run-to-idle a)
      (kill-buffer a)
      (let ((b (passepartout-test--chat project)))
        (passepartout-test--send b "Read a.txt")
        (passepartout-history-test--run-to-idle b)
        (with-current-buffer b
          (let ((err (should-error (passepartout-undo-turn) :type 'user-error)))
            (should (string-match-p "this session has no turn left to undo" (cadr err))))
          (should (equal (passepartout-history-test--file project "a.txt") "from A\n"))
          (passepartout-test--send b "Write b.txt")
          (passepartout-history-test--run-to-idle b)
          (let ((result (passepartout-undo-turn)))
            (should (equal (plist-get result :undone) "c3"))))
        (should-not (passepartout-history-test--file project "b.txt"))
        (should (equal (passepartout-history-test--file project "a.txt")
                       "from A\n"))))))

(provide 'passepartout-history-tests)
;;; passepartout-history-tests.el ends here
