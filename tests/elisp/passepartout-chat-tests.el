;;; passepartout-chat-tests.el --- ERT tests: chats kept, inline plans, fixes  -*- lexical-binding: t; -*-

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

;; Tests of the chat files and their resumption, flight plans approved
;; in the chat, plans waiting from before, and the fixes of issue 10
;; (each numbered as in the issue).  Most run against the real daemon
;; and fake provider (see passepartout-test-support.el); the effect and
;; usage displays are fed synthetic notifications, since the daemon side
;; of those is tested in Rust.

;;; Code:

(require 'ert)
(require 'org-element)
(require 'passepartout-test-support)

(defconst passepartout-chat-test--rm-call
  '(:command "rm -r old")
  "A shell call that the built-in rules send to a person.")

(defun passepartout-chat-test--plan (chat text)
  "Send TEXT from CHAT and return the id of the flight plan it leads to."
  (passepartout-test--send chat text)
  (passepartout-test--wait-for
      (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))

(defun passepartout-chat-test--status (plan-id)
  "The status Emacs knows for PLAN-ID."
  (plist-get (gethash plan-id passepartout-plan--plans) :status))

(defun passepartout-chat-test--user-messages (request)
  "The contents of the user messages of the fake provider's REQUEST."
  (cl-loop for m across (plist-get (plist-get request :body) :messages)
           when (equal (plist-get m :role) "user")
           collect (plist-get m :content)))

;;;; Fix (1): notes never reach the model

(ert-deftest passepartout-chat-test-note-not-sent ()
  "A status note above the prompt is not part of the next prompt (fix 1)."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Hi."))
    (let ((chat (passepartout-test--chat project)))
      (passepartout--shutdown)
      (passepartout-test--wait-for
          (string-match-p "^: The daemon was stopped" (passepartout-test--text chat))
        10 "the note")
      ;; The note sits above the prompt heading, not under it.
      (should (string-match-p "^: The daemon was stopped.*\n\n\\* You\n\\'"
                              (passepartout-test--text chat)))
      (passepartout-test--send chat "Hello")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (equal (passepartout-chat-test--user-messages
                      (car (passepartout-test--requests)))
                     '("Hello"))))))

;;;; Fix (2): point after a plan turn

(ert-deftest passepartout-chat-test-point-after-plan-turn ()
  "After a turn with a flight plan, typing goes to the new prompt (fix 2)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call)
            (passepartout-test--text-reply "Removed."))
    (make-directory (expand-file-name "old" project))
    (let* ((passepartout-plan-display 'notify)
           (chat (passepartout-test--chat project))
           (window (progn (delete-other-windows)
                          (switch-to-buffer chat)
                          (selected-window)))
           (plan-id (let ((inhibit-message t))
                      (passepartout-chat-test--plan chat "Remove old/"))))
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (passepartout-plan-approve))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (eq (window-buffer window) chat))
      (should (= (window-point window) (with-current-buffer chat (point-max))))
      (with-current-buffer chat
        (should (= (point) (point-max)))
        (should-not (invisible-p (point)))
        (insert "typed next")
        (should (string-suffix-p "\n* You\ntyped next" (buffer-string)))))))

;;;; Fix (3): undo in a plan buffer

(ert-deftest passepartout-chat-test-plan-undo-keeps-plan ()
  "Undoing every edit in a plan buffer never erases the plan (fix 3)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call))
    (make-directory (expand-file-name "old" project))
    (let* ((chat (passepartout-test--chat project))
           (plan-id (passepartout-chat-test--plan chat "Remove old/")))
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (let ((original (buffer-string)))
          (goto-char (point-max))
          (insert "my note")
          (undo-boundary)
          ;; Undo everything there is to undo.
          (let ((last-command nil))
            (condition-case nil
                (dotimes (_ 50)
                  (undo)
                  (setq last-command 'undo))
              (user-error nil)))
          (should (equal (buffer-string) original))
          (should (string-match-p "rm -r old" (buffer-string))))))))

;;;; Fix (4): one Decision section

(ert-deftest passepartout-chat-test-reject-one-decision ()
  "Rejecting leaves exactly one Decision section in the plan (fix 4)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call)
            (passepartout-test--text-reply "Fine."))
    (make-directory (expand-file-name "old" project))
    (let* ((chat (passepartout-test--chat project))
           (plan-id (passepartout-chat-test--plan chat "Remove old/"))
           (answered nil)
           (buffer (passepartout-plan-buffer plan-id)))
      (let ((passepartout-plan-resolved-hook
             (list (lambda (_id) (setq answered t)))))
        (with-current-buffer buffer
          (passepartout-plan-reject "no"))
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (passepartout-test--wait-for answered 10 "plan/resolved"))
      ;; Let the decide answer arrive too, whichever came last.
      (accept-process-output nil 0.3)
      (with-current-buffer buffer
        (let ((count 0))
          (goto-char (point-min))
          (while (re-search-forward "^\\*+ Decision$" nil t) (cl-incf count))
          (should (= count 1))))
      (should (equal (passepartout-chat-test--status plan-id) "rejected")))))

;;;; Fix (5): an edited action is marked, and the model is told

(ert-deftest passepartout-chat-test-edited-action-marked ()
  "An edited, approved action says so in the chat and to the model (fix 5)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call)
            (passepartout-test--text-reply "Done."))
    (make-directory (expand-file-name "old" project))
    (let* ((chat (passepartout-test--chat project))
           (plan-id (passepartout-chat-test--plan chat "Remove old/")))
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (goto-char (point-min))
        (re-search-forward "^#\\+begin_src bash")
        (re-search-forward "rm -r old")
        (replace-match "mkdir made-by-edit" t t)
        (passepartout-plan-approve))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (file-directory-p (expand-file-name "made-by-edit" project)))
      (should (string-match-p (format "^Flight plan %s: executed (edited by you)\\.$" plan-id)
                              (passepartout-test--text chat)))
      (let* ((second (nth 1 (passepartout-test--requests)))
             (body (json-serialize (plist-get second :body))))
        (should (string-match-p "The person edited this action before approving it" body))
        (should (string-match-p "mkdir made-by-edit" body))))))

;;;; Fix (7): the README's install snippet works on this Emacs
;; (see passepartout-readme-tests.el)

;;;; Fix (8): the real error

(ert-deftest passepartout-chat-test-start-error-is-the-real-one ()
  "A daemon that cannot start shows its whole error, not a stray line (fix 8)."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name "passepartout/" (getenv "XDG_CONFIG_HOME"))))
      (make-directory dir t)
      (with-temp-file (expand-file-name "config.toml" dir)
        (insert "model = \n"))
      (let ((err (should-error (passepartout project) :type 'user-error)))
        (should (string-match-p "did not start: passepartout: .*config.toml: TOML parse error at line 1"
                                (cadr err)))))))

;;;; Fix (9): the provider-down message speaks Emacs

(ert-deftest passepartout-chat-test-provider-down-names-emacs-settings ()
  "When no provider answers, the chat names the Emacs settings (fix 9)."
  (passepartout-test-with-daemon nil
    (let* ((passepartout-program-args
            ;; Port 9 (discard) on loopback: nothing listens there.
            (list "serve" "--provider-url" "http://127.0.0.1:9/v1" "--model" "gone"
                  "--state-dir" (expand-file-name "state/" passepartout-test--dir)))
           (chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Anyone there?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 60 "the failure")
      (let ((text (passepartout-test--text chat)))
        (should (string-match-p "passepartout-program-args" text))
        (should (string-match-p "passepartout-menu" text))))))

;;;; Fix (10): the modes explain themselves

(ert-deftest passepartout-chat-test-mode-help-and-menus ()
  "C-h m in chat and plan buffers names the plans, events and restart commands (fix 10)."
  (dolist (mode '(passepartout-chat-mode passepartout-plan-mode))
    (with-temp-buffer
      (funcall mode)
      (let ((help (with-temp-buffer
                    (let ((standard-output (current-buffer)))
                      (princ (substitute-command-keys (documentation mode))))
                    (buffer-string))))
        (dolist (command '("passepartout-plans" "passepartout-events" "passepartout-restart"))
          (should (string-match-p (regexp-quote command) help))))
      (should (keymapp (lookup-key (current-local-map)
                                   (vector 'menu-bar (if (eq mode 'passepartout-chat-mode)
                                                         'Passepartout
                                                       'Flight-plan)))))
      (should (eq (key-binding (kbd "C-c C-p")) 'passepartout-plans)))))

;;;; Chats kept as files

(ert-deftest passepartout-chat-test-chat-file-written ()
  "A chat is an Org file holding the transcript and its session id."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Kept."))
    (let* ((chat (passepartout-test--chat project))
           (file (buffer-local-value 'passepartout-chat--file chat))
           (session (buffer-local-value 'passepartout-chat--session-id chat)))
      (should (string-prefix-p (expand-file-name passepartout-chat-directory) file))
      (passepartout-test--send chat "Keep this.")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (let ((text (with-temp-buffer (insert-file-contents file) (buffer-string))))
        (should (string-prefix-p ":PROPERTIES:\n" text))
        (should (string-match-p (format "^:PASSEPARTOUT_SESSION: %s$" session) text))
        (should (string-match-p (format "^:PASSEPARTOUT_CWD: %s$" (regexp-quote project)) text))
        (should (string-match-p "^\\* You\nKeep this\\.\n\n\\* passepartout\nKept\\.$" text)))
      ;; The list shows it.
      (with-current-buffer (passepartout-chats-list)
        (goto-char (point-min))
        (should (equal (tabulated-list-get-id) file))
        (should (string-match-p "Keep this\\." (buffer-string)))))))

(defun passepartout-chat-test--reopen (chat)
  "Kill CHAT after a daemon restart and open its file again; return the new buffer."
  (let ((file (buffer-local-value 'passepartout-chat--file chat)))
    (kill-buffer chat)
    (passepartout--shutdown)
    (let ((buffer (passepartout-chat-open-file file)))
      (with-current-buffer buffer (passepartout-chat--ensure-session))
      buffer)))

(ert-deftest passepartout-chat-test-resume-refused ()
  "Reopening a chat whose session the daemon cannot load starts a new one, and says so.
The session's journal is deleted first, so the daemon has nothing to load."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "First answer.")
            (passepartout-test--text-reply "Second answer."))
    (let* ((chat (passepartout-test--chat project))
           (old (buffer-local-value 'passepartout-chat--session-id chat)))
      (passepartout-test--send chat "First.")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      ;; A daemon that can load sessions cannot load this one once its
      ;; journal is gone (an older daemon refuses `session/load' anyway).
      (let ((journal (expand-file-name (concat "sessions/" old ".jsonl") state)))
        (when (file-exists-p journal)
          (delete-file journal)))
      (let* ((again (passepartout-chat-test--reopen chat))
             (text (passepartout-test--text again)))
        (should (string-match-p "^\\* passepartout\nFirst answer\\.$" text))
        (should (string-match-p (format "^: Could not resume session %s" old) text))
        (should-not (equal old (buffer-local-value 'passepartout-chat--session-id again)))
        ;; The new session works, in the same buffer and file.
        (passepartout-test--send again "Second.")
        (passepartout-test--wait-for (passepartout-test--idle-p again) 30)
        (should (string-match-p "^Second answer\\.$" (passepartout-test--text again)))
        (should (string-match-p
                 "Second answer\\."
                 (with-temp-buffer
                   (insert-file-contents (buffer-local-value 'passepartout-chat--file again))
                   (buffer-string))))))))

(ert-deftest passepartout-chat-test-resume-loads-session ()
  "Reopening a chat resumes its session: same id, the model sees the history."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "First answer.")
            (passepartout-test--text-reply "Second answer."))
    (skip-unless (passepartout-test--daemon-supports-load))
    (let* ((chat (passepartout-test--chat project))
           (old (buffer-local-value 'passepartout-chat--session-id chat)))
      (passepartout-test--send chat "First.")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (let* ((again (passepartout-chat-test--reopen chat)))
        (should (equal old (buffer-local-value 'passepartout-chat--session-id again)))
        (should (string-match-p "^: Resumed session" (passepartout-test--text again)))
        ;; Replayed history is not shown twice.
        (should (= 1 (cl-count-if (lambda (l) (equal l "First answer."))
                                  (split-string (passepartout-test--text again) "\n"))))
        (passepartout-test--send again "Second.")
        (passepartout-test--wait-for (passepartout-test--idle-p again) 30)
        (should (equal (passepartout-chat-test--user-messages
                        (nth 1 (passepartout-test--requests)))
                       '("First." "Second.")))))))

;;;; Approving in the chat

(ert-deftest passepartout-chat-test-inline-approve ()
  "A waiting plan shows in the chat with its gate trace; C-c C-c there approves."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call)
            (passepartout-test--text-reply "Removed."))
    (make-directory (expand-file-name "old" project))
    (let* ((passepartout-plan-display 'notify)
           (chat (passepartout-test--chat project))
           (plan-id (let ((inhibit-message t))
                      (passepartout-chat-test--plan chat "Remove old/"))))
      (with-current-buffer chat
        (goto-char (point-min))
        (re-search-forward (format "^Waiting for flight plan %s: C-c C-c approve, C-c C-k reject, C-c C-o open" plan-id))
        (should (string-match-p "^Gate trace:\n| gate +| decision +| reason"
                                (buffer-substring-no-properties (line-beginning-position 2)
                                                                (point-max))))
        (should (eq (key-binding (kbd "C-c C-o")) #'passepartout-chat-open-plan))
        (should (eq (key-binding (kbd "C-c C-c")) #'passepartout-chat-approve-plan))
        (call-interactively #'passepartout-chat-approve-plan))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should-not (file-exists-p (expand-file-name "old" project)))
      (should (equal (passepartout-chat-test--status plan-id) "executed"))
      (let ((text (passepartout-test--text chat)))
        (should (string-match-p (format "^Flight plan %s: executed\\.$" plan-id) text))
        (should-not (string-match-p "C-c C-c approve" text)))
      ;; Outside the waiting lines, C-c C-c is the chat's again.
      (with-current-buffer chat
        (should-not (eq (key-binding (kbd "C-c C-c")) #'passepartout-chat-approve-plan))))))

(ert-deftest passepartout-chat-test-inline-reject ()
  "C-c C-k on a waiting plan in the chat rejects it with a reason."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call)
            (passepartout-test--text-reply "Kept."))
    (make-directory (expand-file-name "old" project))
    (let* ((passepartout-plan-display 'notify)
           (chat (passepartout-test--chat project))
           (plan-id (let ((inhibit-message t))
                      (passepartout-chat-test--plan chat "Remove old/"))))
      (with-current-buffer chat
        (goto-char (point-min))
        (re-search-forward "^Waiting for flight plan")
        (passepartout-chat-reject-plan "not today"))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (file-directory-p (expand-file-name "old" project)))
      (should (equal (passepartout-chat-test--status plan-id) "rejected"))
      (should (string-match-p "not today"
                              (json-serialize (plist-get (nth 1 (passepartout-test--requests))
                                                         :body)))))))

;;;; Plans waiting from before

(ert-deftest passepartout-chat-test-pending-plans-announced ()
  "On start, plans waiting from before are announced; the list refreshes on decisions."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-chat-test--rm-call))
    (make-directory (expand-file-name "old" project))
    (let* ((passepartout-plan-display 'notify)
           (chat (passepartout-test--chat project))
           (plan-id (let ((inhibit-message t))
                      (passepartout-chat-test--plan chat "Remove old/")))
           (messages nil))
      ;; A daemon that stops cleanly cancels its turns, and with them their
      ;; plans; one that is killed leaves them pending for the next start.
      (let ((inhibit-message t))
        (signal-process (process-id (passepartout--connection-process passepartout--connection)) 'kill)
        (passepartout-test--wait-for (not (passepartout--live-connection)) 10 "death"))
      (clrhash passepartout-plan--plans)
      (cl-letf (((symbol-function 'message)
                 (lambda (fmt &rest args)
                   (when fmt (push (apply #'format fmt args) messages)))))
        ;; The plans list starts the daemon by itself.
        (passepartout-plans)
        (should (passepartout--live-connection))
        (with-current-buffer "*passepartout plans*"
          (goto-char (point-min))
          (should (equal (tabulated-list-get-id) plan-id)))
        (passepartout-test--chat project))
      ;; The plan waits, with its keys, in the chat that made it: no
      ;; note lists it there again (issue 41).
      (should (string-match-p (format "^Waiting for flight plan %s: " plan-id)
                              (passepartout-test--text chat)))
      (should-not (string-match-p "from before" (passepartout-test--text chat)))
      (should (cl-some (lambda (m) (string-match-p "1 flight plan waits for you" m)) messages))
      ;; Deciding updates the open list without being asked.
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (let ((inhibit-message t)) (passepartout-plan-reject "")))
      (passepartout-test--wait-for
          (with-current-buffer "*passepartout plans*"
            (goto-char (point-min))
            (null (tabulated-list-get-id)))
        20 "the list to drop the decided plan"))))

;;;; Provider and model menu

(ert-deftest passepartout-chat-test-menu-lists-models ()
  "The menu's model list comes from the provider's server, through the daemon."
  (passepartout-test-with-daemon nil
    (with-current-buffer (passepartout-test--chat project)
      (let ((providers (passepartout-menu--providers t)))
        (should (= (length providers) 1))
        (should (equal (append (plist-get (car providers) :models) nil)
                       '("fake-model" "fake-large")))))
    (should (commandp 'passepartout-menu))
    (should (transient-get-suffix 'passepartout-menu "RET"))
    (should (transient-get-suffix 'passepartout-menu "m"))))

(ert-deftest passepartout-chat-test-menu-opens ()
  "The transient menu opens in a chat and shows this chat's model."
  (with-temp-buffer
    (passepartout-chat-mode)
    (insert ":PROPERTIES:\n:PASSEPARTOUT_MODEL: some-model\n:END:\n")
    (save-window-excursion
      (switch-to-buffer (current-buffer))
      (unwind-protect
          (progn
            (call-interactively #'passepartout-menu)
            (should (eq (oref transient--prefix command) 'passepartout-menu))
            (let ((shown (with-current-buffer " *transient*" (buffer-string))))
              (should (string-match-p "default provider / some-model" shown))
              (should (string-match-p "RET Use for this chat" shown))
              (should (string-match-p "r Restart the daemon" shown))))
        ;; `transient-quit-all' exits only from the command loop's
        ;; `post-command-hook', which a direct call never runs: a menu
        ;; left open would take the keys of later tests.  Transient's
        ;; own exit after an error does it all now (the transient of
        ;; Emacs 28.2, 0.3.7, and that of Emacs 30.1 both have it).
        (transient--emergency-exit)))))

(ert-deftest passepartout-chat-test-menu-configures-session ()
  "Choosing a model in the menu changes this chat's next turn, and is kept in the file."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Large.")
            (passepartout-test--text-reply "Still large."))
    (let ((chat (passepartout-test--chat project)))
      (with-current-buffer chat
        (let ((inhibit-message t))
          (passepartout-menu-apply-settings nil "fake-large" 321)))
      (passepartout-test--send chat "Which model?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (let ((body (plist-get (car (passepartout-test--requests)) :body)))
        (should (equal (plist-get body :model) "fake-large"))
        (should (equal (plist-get body :max_tokens) 321)))
      (let ((file (buffer-local-value 'passepartout-chat--file chat)))
        (should (string-match-p "^:PASSEPARTOUT_MODEL: fake-large$"
                                (with-temp-buffer (insert-file-contents file) (buffer-string))))
        ;; A reopened chat (new daemon, new session) asks for it again.
        (let ((again (passepartout-chat-test--reopen chat)))
          (passepartout-test--send again "And now?")
          (passepartout-test--wait-for (passepartout-test--idle-p again) 30)
          (should (equal (plist-get (plist-get (nth 1 (passepartout-test--requests)) :body)
                                    :model)
                         "fake-large")))))))

;;;; Synthetic notifications: effects and usage

(defmacro passepartout-chat-test--with-buffer (&rest body)
  "Run BODY in a chat buffer with session \"s-test\" and a running turn."
  (declare (indent 0))
  `(let* ((passepartout-chat-directory nil)
          (buffer (passepartout-chat-buffer temporary-file-directory)))
     (unwind-protect
         (with-current-buffer buffer
           (setq passepartout-chat--session-id "s-test")
           (puthash "s-test" buffer passepartout-chat--sessions)
           (goto-char (point-max))
           (insert "Change a file.")
           (passepartout-chat-begin-turn)
           ,@body)
       (remhash "s-test" passepartout-chat--sessions)
       (with-current-buffer buffer (set-buffer-modified-p nil))
       (kill-buffer buffer))))

;; Before the fix, Org 9.7 (Emacs 30) spent about 7 s of CPU here: its
;; element cache searched the whole line before and after every chunk.
(ert-deftest passepartout-chat-test-long-line-streams-in-chunk-time ()
  "A 1 MB one-line answer streams in time linear in it; Org's cache is back after."
  (let ((org-element-use-cache t))
    (passepartout-chat-test--with-buffer
      (let ((chunk (make-string 4000 ?x))
            (start (float-time (get-internal-run-time))))
        (dotimes (_ 250)
          (passepartout-chat--insert (passepartout-chat--org-safe chunk)))
        (should (< (- (float-time (get-internal-run-time)) start) 2.0)))
      (passepartout-chat-end-turn)
      (should (eq org-element-use-cache t))
      (should-not (local-variable-p 'org-element-use-cache))
      ;; The cache, rebuilt, parses the turn that it did not see.
      (goto-char (point-min))
      (search-forward (make-string 100 ?x))
      (should (eq (org-element-type (org-element-at-point)) 'paragraph))
      (org-back-to-heading t)
      (should (looking-at-p "\\* passepartout$")))))

(ert-deftest passepartout-chat-test-effect-summary-and-diffs ()
  "A tool call's effect shows as one line, its diffs folded beneath."
  (passepartout-chat-test--with-buffer
    (passepartout--handle-notification
     nil 'session/update
     '(:sessionId "s-test"
                  :update (:sessionUpdate "tool_call" :toolCallId "w1" :title "write_file: a.txt"
                                          :kind "edit" :status "in_progress")))
    (passepartout--handle-notification
     nil 'session/update
     '(:sessionId "s-test"
                  :update (:sessionUpdate "tool_call_update" :toolCallId "w1" :status "completed"
                                          :content [(:type "content" :content (:type "text" :text "wrote a.txt"))
                                                    (:type "diff" :path "a.txt"
                                                           :oldText "one\ntwo\n" :newText "one\n2\n")
                                                    (:type "diff" :path "b.txt" :newText "new\n")]
                                          :rawOutput (:outcome "executed"
                                                               :effect (:checkpoint "cp-7" :created ["b.txt"]
                                                                                    :modified ["a.txt"] :deleted []
                                                                                    :bytes_added 6 :bytes_removed 4)))))
    (let ((text (buffer-string)))
      (should (string-match-p
               "^Changed files: 1 created, 1 modified, 0 deleted (\\+6/-4 bytes), checkpoint cp-7$"
               text))
      (should (string-match-p "^\\*\\*\\* Diff: a\\.txt\n#\\+begin_src diff\n--- before\n\\+\\+\\+ after\n@@ .* @@\n one\n-two\n\\+2\n#\\+end_src$" text))
      (should (string-match-p "^\\*\\*\\* New file: b\\.txt\n" text)))
    ;; The diff body is folded, to open with TAB.
    (goto-char (point-min))
    (re-search-forward "^\\*\\*\\* Diff: a\\.txt")
    (should (invisible-p (1+ (line-end-position))))))

(ert-deftest passepartout-chat-test-usage-in-mode-line ()
  "`_passepartout/usage' shows tokens and cost in the mode line."
  (passepartout-chat-test--with-buffer
    (passepartout--handle-notification
     nil '_passepartout/usage
     '(:sessionId "s-test"
                  :turn (:inputTokens 1200 :outputTokens 300 :cachedTokens 0 :cost 0.01)
                  :session (:inputTokens 15300 :outputTokens 900 :cachedTokens 1000 :cost 0.0421)
                  :day (:inputTokens 2000000 :outputTokens 5000 :cachedTokens 0 :cost 1.5)
                  :currency "USD" :budget nil))
    (should (string-match-p "15\\.3k↑900↓ \\$0\\.042 (day \\$1\\.500)"
                            (passepartout-chat--mode-line)))
    ;; A free local model shows tokens only.
    (passepartout--handle-notification
     nil '_passepartout/usage
     '(:sessionId "s-test"
                  :turn (:inputTokens 10 :outputTokens 5 :cachedTokens 0 :cost 0.0)
                  :session (:inputTokens 950 :outputTokens 5 :cachedTokens 0 :cost 0.0)
                  :day (:inputTokens 950 :outputTokens 5 :cachedTokens 0 :cost 0.0)
                  :currency "USD" :budget nil))
    (should (string-match-p "950↑5↓\\]\\'" (passepartout-chat--mode-line)))))

(provide 'passepartout-chat-tests)
;;; passepartout-chat-tests.el ends here
