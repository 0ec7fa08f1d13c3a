;;; passepartout-restart-tests.el --- Plans and chats across a restart of Emacs  -*- lexical-binding: t; -*-

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

;; Issue 41: a flight plan left waiting when Emacs stops is live in the
;; chat resumed after the restart, and its outcome reaches the chat and
;; its file wherever it is decided; `passepartout' offers the last chat;
;; a chat is never open twice.  "Emacs restarted" is
;; `passepartout-test--restart-emacs': the daemon killed (its plans stay
;; pending), the chat buffers saved and killed, everything Emacs knew of
;; the package forgotten, so what follows reads only the disk.

;;; Code:

(require 'passepartout-test-support)

(defconst passepartout-restart-test--rm-call '(:command "rm -r old")
  "A shell call that the built-in rules send to a person.")

(defun passepartout-restart-test--waiting-plan (project)
  "Open PROJECT's chat, ask for a plan, return (CHAT FILE PLAN-ID)."
  (make-directory (expand-file-name "old" project))
  (let* ((passepartout-plan-display 'notify)
         (chat (passepartout-test--chat project))
         (inhibit-message t))
    (passepartout-test--send chat "Remove old/")
    (list chat
          (buffer-local-value 'passepartout-chat--file chat)
          (passepartout-test--wait-for
              (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))))

(defun passepartout-restart-test--resume (project)
  "Run M-x passepartout in PROJECT after a restart, saying yes to resuming."
  (let ((default-directory project)
        (asked nil))
    (cl-letf (((symbol-function 'y-or-n-p)
               (lambda (prompt) (setq asked prompt) t)))
      (let ((inhibit-message t))
        (call-interactively #'passepartout)))
    asked))

(ert-deftest passepartout-restart-test-plan-approved-from-resumed-chat ()
  "After Emacs restarts, M-x passepartout resumes the chat; C-c C-c there approves.
The chat and its file show the outcome; there is one buffer per chat."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-restart-test--rm-call)
            (passepartout-test--text-reply "Removed."))
    (pcase-let ((`(,_chat ,file ,plan-id) (passepartout-restart-test--waiting-plan project)))
      (passepartout-test--kill-daemon)
      (passepartout-test--restart-emacs)
      (should (string-match-p "^\\*\\* WAITING " (passepartout-test--file-text file)))
      ;; M-x passepartout offers the last chat instead of an empty one.
      (should (string-match-p "\\`Resume the last chat of .*(Remove old/)\\? \\'"
                              (passepartout-restart-test--resume project)))
      (let ((chat (car (passepartout-test--chat-buffers))))
        (should (equal (passepartout-test--chat-buffers) (list chat)))
        (should (equal (buffer-local-value 'passepartout-chat--file chat) file))
        ;; No "waiting from before" note: the plan waits where it was made.
        (should-not (string-match-p "wait[s]? for you from before" (passepartout-test--text chat)))
        (with-current-buffer chat
          ;; On the heading, as on the lines below it: the plan's keys.
          (goto-char (point-min))
          (re-search-forward "^\\*\\* WAITING ")
          (beginning-of-line)
          (should (eq (key-binding (kbd "C-c C-c")) #'passepartout-chat-approve-plan))
          (re-search-forward (format "^Waiting for flight plan %s: " plan-id))
          (should (eq (key-binding (kbd "C-c C-k")) #'passepartout-chat-reject-plan))
          (re-search-backward "^\\*\\* WAITING ")
          (let ((inhibit-message t))
            (call-interactively #'passepartout-chat-approve-plan)))
        (passepartout-test--wait-for
            (string-match-p (format "^Flight plan %s: executed\\.$" plan-id)
                            (passepartout-test--text chat))
          30 "the outcome in the chat")
        (should-not (file-exists-p (expand-file-name "old" project)))
        (let ((text (passepartout-test--text chat)))
          (should (string-match-p "^\\*\\* DONE shell: rm -r old" text))
          (should-not (string-match-p "^\\*\\* WAITING " text))
          (should-not (string-match-p "C-c C-c approve" text)))
        (passepartout-test--wait-for
            (let ((saved (passepartout-test--file-text file)))
              (and (string-match-p (format "^Flight plan %s: executed\\.$" plan-id) saved)
                   (string-match-p "^\\*\\* DONE shell: rm -r old" saved)
                   (not (string-match-p "^\\*\\* WAITING " saved))))
          10 "the outcome in the chat's file")
        ;; Opening the chat again, from the list or by M-x passepartout,
        ;; shows the same buffer.
        (should (eq (passepartout-chat-open-file file) chat))
        (let ((default-directory project))
          (should (eq (call-interactively #'passepartout) chat)))
        (should (equal (passepartout-test--chat-buffers) (list chat)))))))

(ert-deftest passepartout-restart-test-plan-decided-with-chat-closed ()
  "A plan decided while its chat is not open: the chat's file shows the outcome."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-restart-test--rm-call))
    (pcase-let ((`(,_chat ,file ,plan-id) (passepartout-restart-test--waiting-plan project)))
      (passepartout-test--kill-daemon)
      (passepartout-test--restart-emacs)
      ;; The plans list starts the daemon, which offers the plan again.
      (let ((inhibit-message t))
        (passepartout-plans)
        (with-current-buffer (passepartout-plan-buffer plan-id)
          (passepartout-plan-reject "")))
      (passepartout-test--wait-for
          (string-match-p (format "^Flight plan %s: rejected\\.$" plan-id)
                          (passepartout-test--file-text file))
        30 "the outcome in the closed chat's file")
      (let ((saved (passepartout-test--file-text file)))
        (should (string-match-p "^\\*\\* REJECTED shell: rm -r old" saved))
        (should-not (string-match-p "Waiting for flight plan" saved)))
      (should (file-exists-p (expand-file-name "old" project)))
      (should-not (passepartout-test--chat-buffers)))))

(defun passepartout-restart-test--cli (&rest args)
  "Run the daemon's command line with ARGS on the fixture's state directory.
Return its output; fail the test when it fails."
  (with-temp-buffer
    (let ((status (apply #'call-process passepartout-test--bin nil t nil
                         (append args (list "--state-dir"
                                            (expand-file-name "state/" passepartout-test--dir))))))
      (should (equal (list status (buffer-string)) (list 0 (buffer-string))))
      (buffer-string))))

(ert-deftest passepartout-restart-test-plan-decided-from-the-cli ()
  "A plan rejected from a terminal: an open chat shows it, and its file."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-restart-test--rm-call)
            (passepartout-test--text-reply "Kept."))
    (pcase-let ((`(,chat ,file ,plan-id) (passepartout-restart-test--waiting-plan project)))
      (passepartout-restart-test--cli "plans" "reject" plan-id)
      (passepartout-test--wait-for
          (string-match-p (format "^Flight plan %s: rejected\\.$" plan-id)
                          (passepartout-test--text chat))
        30 "the outcome in the chat")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30 "the turn's end")
      (should (string-match-p "^\\*\\* REJECTED shell: rm -r old" (passepartout-test--text chat)))
      (passepartout-test--wait-for
          (string-match-p (format "^Flight plan %s: rejected\\.$" plan-id)
                          (passepartout-test--file-text file))
        10 "the outcome in the file"))))

(ert-deftest passepartout-restart-test-plan-gone-is-said ()
  "A plan decided from a terminal while Emacs was away is not left waiting.
The daemon no longer lists it; asked for it (`_passepartout/plans/get'),
it says how it ended, and the chat shows that outcome."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-restart-test--rm-call))
    (pcase-let ((`(,_chat ,file ,plan-id) (passepartout-restart-test--waiting-plan project)))
      (passepartout-test--kill-daemon)
      (passepartout-test--restart-emacs)
      (passepartout-restart-test--cli "plans" "reject" plan-id)
      (should (string-match-p "^\\*\\* WAITING " (passepartout-test--file-text file)))
      (passepartout-restart-test--resume project)
      (let ((chat (car (passepartout-test--chat-buffers))))
        (let ((text (passepartout-test--text chat)))
          (should (string-match-p (format "^Flight plan %s: rejected\\.$" plan-id) text))
          (should (string-match-p "^\\*\\* REJECTED shell: rm -r old" text))
          (should-not (string-match-p "C-c C-c approve" text)))
        (passepartout-test--wait-for
            (string-match-p "^\\*\\* REJECTED " (passepartout-test--file-text file))
          10 "the file")))))

(ert-deftest passepartout-restart-test-new-chat-told-of-plans ()
  "A new chat, the last one not resumed, names the plans waiting from before."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-restart-test--rm-call))
    (pcase-let ((`(,_chat ,_file ,plan-id) (passepartout-restart-test--waiting-plan project)))
      (passepartout-test--kill-daemon)
      (passepartout-test--restart-emacs)
      (let ((chat (let ((inhibit-message t)) (passepartout project))))
        (should (string-match-p
                 (format "^: 1 flight plan waits for you from before (M-x passepartout-plans):\n: - %s shell: rm -r old$"
                         plan-id)
                 (passepartout-test--text chat)))))))

(ert-deftest passepartout-restart-test-one-buffer-per-chat ()
  "Opening a saved chat never makes a second buffer, nor leaves an empty one."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "First answer."))
    (let* ((chat (passepartout-test--chat project))
           (file (buffer-local-value 'passepartout-chat--file chat)))
      (passepartout-test--send chat "First.")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (passepartout-test--restart-emacs)
      ;; Declining the offer gives a new, empty chat...
      (let ((default-directory project))
        (cl-letf (((symbol-function 'y-or-n-p) (lambda (_) nil)))
          (let ((inhibit-message t)) (call-interactively #'passepartout))))
      (let ((empty (car (passepartout-test--chat-buffers)))
            (old (let ((inhibit-message t)) (passepartout-chat-open-file file))))
        ;; ...which opening the old one replaces, its file with it.
        (should-not (buffer-live-p empty))
        (should (equal (passepartout-test--chat-buffers) (list old)))
        (should (eq (passepartout-chat-open-file file) old))
        (should (equal (passepartout-test--chat-buffers) (list old)))
        (should (= 1 (length (directory-files passepartout-chat-directory nil "\\.org\\'"))))))))

;;; passepartout-restart-tests.el ends here
