;;; passepartout-stream-tests.el --- Streaming that never blocks input  -*- lexical-binding: t; -*-

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

;; Issue 41: the process filter only queues answer text, a timer shows
;; it within a time budget that yields to input; streamed text is left
;; to jit-lock only when its turn ends, long lines folded past
;; `passepartout-chat--long-line'; the chat file is written from the
;; first change on; the daemon's skill warning is a note, not reasoning;
;; and the smaller fixes (first prompt line in the list, plan edits
;; outside the action block, quiet shell blocks).  The latency itself
;; is measured by tests/elisp/bench-latency.el.

;;; Code:

(require 'passepartout-test-support)

(defmacro passepartout-stream-test--with-chat (&rest body)
  "Run BODY in a chat buffer of session \"s-stream\" with a running turn.
The chat is saved in a temporary directory, bound to `chat-dir'."
  (declare (indent 0))
  `(let* ((chat-dir (make-temp-file "passepartout-stream" t))
          (passepartout-chat-directory chat-dir)
          (buffer (passepartout-chat-buffer (make-temp-file "passepartout-project" t))))
     (unwind-protect
         (with-current-buffer buffer
           (setq passepartout-chat--session-id "s-stream")
           (puthash "s-stream" buffer passepartout-chat--sessions)
           (goto-char (point-max))
           (insert "Tell me.")
           (passepartout-chat-begin-turn)
           ,@body)
       (remhash "s-stream" passepartout-chat--sessions)
       (with-current-buffer buffer
         (when passepartout-chat--save-timer (cancel-timer passepartout-chat--save-timer))
         (set-buffer-modified-p nil))
       (let ((kill-buffer-hook nil)) (kill-buffer buffer))
       (delete-directory chat-dir t))))

(defun passepartout-stream-test--update (update)
  "Hand session UPDATE (a plist) to the package as the daemon would."
  (passepartout--dispatch-notification
   nil 'session/update (list :sessionId "s-stream" :update update)))

(defun passepartout-stream-test--chunk (kind text)
  "Hand a chunk of answer TEXT of KIND (\"agent_message_chunk\"…) to the package."
  (passepartout-stream-test--update
   (list :sessionUpdate kind :content (list :type "text" :text text))))

(ert-deftest passepartout-stream-test-filter-queues-and-order-holds ()
  "Text waits for the timer; a tool call, a note or the end comes after it."
  (passepartout-stream-test--with-chat
    (passepartout-stream-test--chunk "agent_message_chunk" "First part.\n")
    ;; Queued by the filter, not yet in the buffer.
    (should-not (string-match-p "First part" (buffer-string)))
    (should passepartout-chat--drain-timer)
    (passepartout-stream-test--update
     '(:sessionUpdate "tool_call" :toolCallId "t1" :title "read_file: a" :status "in_progress"))
    (passepartout-stream-test--chunk "agent_message_chunk" "Second part.\n")
    ;; The timer shows the rest.
    (passepartout-test--wait-for (null passepartout-chat--pending) 5 "the queue drained")
    (passepartout-chat-end-turn)
    (let ((text (buffer-string)))
      (should (string-match-p
               "^\\* passepartout\nFirst part\\.\n\\*\\* RUNNING read_file: a\n\\(?:.*\n\\)*?\\*\\* Answer\nSecond part\\.\n"
               text)))))

(ert-deftest passepartout-stream-test-drain-yields-to-input ()
  "With input pending, a timer run shows one piece and leaves the rest for later."
  (passepartout-stream-test--with-chat
    (dotimes (i 5)
      (passepartout-stream-test--chunk "agent_message_chunk" (format "piece %d\n" i)))
    (cancel-timer passepartout-chat--drain-timer)
    (setq passepartout-chat--drain-timer nil)
    (cl-letf (((symbol-function 'input-pending-p) (lambda (&rest _) t)))
      (passepartout-chat--drain (current-buffer)))
    (should (string-match-p "piece 0\n" (buffer-string)))
    (should-not (string-match-p "piece 1" (buffer-string)))
    (should (= (length passepartout-chat--pending) 4))
    (should passepartout-chat--drain-timer)
    (cl-letf (((symbol-function 'input-pending-p) #'ignore))
      (let ((passepartout-chat--insert-budget 60))
        (passepartout-chat--drain (current-buffer))))
    (should (string-match-p "piece 0\npiece 1\npiece 2\npiece 3\npiece 4\n" (buffer-string)))))

(ert-deftest passepartout-stream-test-fontified-when-the-turn-ends ()
  "Streamed text skips jit-lock until the turn ends; a long line stays folded."
  (passepartout-stream-test--with-chat
    (let ((long (make-string (* 3 passepartout-chat--long-line) ?w)))
      (passepartout-chat-insert-message "A *short* line.\n")
      (passepartout-chat-insert-message long)
      (passepartout-chat-insert-message "\nThe end.\n")
      (goto-char (point-min))
      (search-forward "A *short*")
      (should (eq (get-text-property (point) 'fontified) t))
      (search-forward "www")
      (let ((line-start (line-beginning-position)))
        (should-not (get-text-property (+ line-start 10) 'invisible))
        (should (eq (get-text-property (+ line-start passepartout-chat--long-line 10) 'invisible)
                    'passepartout-long-line))
        (passepartout-chat-end-turn)
        ;; Short lines go back to jit-lock (fontified when shown)...
        (goto-char (point-min))
        (search-forward "A *short*")
        (should-not (get-text-property (point) 'fontified))
        ;; ...the long one is never fontified, its tail stays folded.
        (should (eq (get-text-property (+ line-start 10) 'fontified) t))
        ;; Its newline as well: font-lock would extend a region starting
        ;; there to the whole line.
        (should (eq (get-text-property (+ line-start (length long)) 'fontified) t))
        (should (invisible-p (+ line-start passepartout-chat--long-line 10)))
        (passepartout-chat-show-long-lines)
        (should-not (invisible-p (+ line-start passepartout-chat--long-line 10)))
        ;; The text is the answer, whole: folding is display only.
        (should (string-match-p (concat "\n" long "\nThe end\\.\n") (buffer-string)))))))

(ert-deftest passepartout-stream-test-saves-only-what-changed ()
  "A save writes from the first change on; the file always equals the buffer."
  (passepartout-stream-test--with-chat
    (let ((file passepartout-chat--file)
          (writes nil))
      (passepartout-chat-save)
      (should (equal (passepartout-test--file-text file) (buffer-string)))
      (cl-letf* ((write (symbol-function 'write-region))
                 ((symbol-function 'write-region)
                  (lambda (start end name &optional append &rest rest)
                    (push (list start end append) writes)
                    (apply write start end name append rest))))
        (passepartout-chat-insert-message (make-string 200000 ?a))
        (setq writes nil)
        (passepartout-chat-save)
        ;; One write, at an offset, of what was added.
        (should (= (length writes) 1))
        (should (integerp (nth 2 (car writes))))
        (should (equal (passepartout-test--file-text file) (buffer-string)))
        ;; In the background: in pieces, each at most a piece long.
        (passepartout-chat-insert-message (make-string 200000 ?b))
        (setq writes nil)
        (passepartout-chat--save-later 0)
        (passepartout-test--wait-for (not (buffer-modified-p)) 5 "the pieces written")
        (should (> (length writes) 1))
        (dolist (w writes)
          (should (<= (- (nth 1 w) (nth 0 w)) passepartout-chat--save-piece)))
        (should (equal (passepartout-test--file-text file) (buffer-string)))
        ;; A change near the top, and a file that shrinks: still equal.
        (passepartout-chat--set-property "PASSEPARTOUT_MODEL" "m")
        (passepartout-chat-save)
        (should (equal (passepartout-test--file-text file) (buffer-string)))
        (passepartout-chat-end-turn)
        (goto-char (point-max))
        (insert "a prompt I will delete")
        (passepartout-chat-save)
        (delete-region (- (point-max) 10) (point-max))
        (passepartout-chat-save)
        (should (equal (passepartout-test--file-text file) (buffer-string)))))))

(ert-deftest passepartout-stream-test-skill-warning-is-a-note ()
  "The daemon's warning about broken skill files is a note, not the model's reasoning."
  (passepartout-stream-test--with-chat
    (passepartout-stream-test--chunk
     "agent_thought_chunk"
     (concat "⚠ 1 error in skill or policy files: a broken file offers no tools or prompts, only its rules (a broken deny/ask rule asks for its whole scope). Fix with `passepartout skills check`:\n"
             "  skills/bad.org:3:1: error: tool `x` has no body\n\n"
             "Let me think."))
    (passepartout-chat-end-turn)
    (let ((text (buffer-string)))
      (should (string-match-p "^\\* passepartout\n: ⚠ 1 error in skill or policy files: .*\n:   skills/bad\\.org:3:1: error: tool `x` has no body\n\\*\\* Reasoning\nLet me think\\." text))
      (should-not (string-match-p "\\*\\* Reasoning\n⚠" text)))))

(ert-deftest passepartout-stream-test-marked-notice-is-a-note ()
  "A thought chunk the daemon marks as its notice is a note, whatever its wording."
  (passepartout-stream-test--with-chat
    (passepartout-stream-test--update
     (list :sessionUpdate "agent_thought_chunk"
           :content (list :type "text" :text "Some other daemon warning.\n")
           :_meta (list :passepartout (list :notice "skills"))))
    (passepartout-stream-test--chunk "agent_thought_chunk" "Let me think.")
    (passepartout-chat-end-turn)
    (let ((text (buffer-string)))
      (should (string-match-p "^: Some other daemon warning\\.\n\\*\\* Reasoning\nLet me think\\." text)))))

(ert-deftest passepartout-stream-test-gc-threshold-held-while-streaming ()
  "A streaming chat raises `gc-cons-threshold'; once idle after it, the person's is back."
  (let ((gc-cons-threshold 800000)
        (passepartout-chat--gc-holders nil)
        (passepartout-chat--gc-saved nil)
        (passepartout-chat--gc-restore-timer nil)
        (timer-idle-list nil))
    (passepartout-stream-test--with-chat
      (should (= gc-cons-threshold passepartout-chat-stream-gc-threshold))
      (passepartout-stream-test--chunk "agent_message_chunk" "Hello.")
      (passepartout-chat-end-turn)
      ;; Still raised: put back when Emacs is idle, not while keys come.
      (should passepartout-chat--gc-restore-timer)
      (should (= gc-cons-threshold passepartout-chat-stream-gc-threshold))
      (should-not passepartout-chat--gc-holders)
      (passepartout-chat--restore-gc)
      (should (= gc-cons-threshold 800000)))
    ;; A chat killed while it streams lets go too (`with-temp-buffer'
    ;; would run no kill hook).
    (let ((chat (generate-new-buffer "passepartout-gc-test")))
      (with-current-buffer chat
        (passepartout-chat--hold-gc)
        (should (= gc-cons-threshold passepartout-chat-stream-gc-threshold)))
      (kill-buffer chat))
    (should-not passepartout-chat--gc-holders)
    (passepartout-chat--restore-gc)
    (should (= gc-cons-threshold 800000))
    (let ((passepartout-chat-stream-gc-threshold nil))
      (with-temp-buffer
        (passepartout-chat--hold-gc)
        (should (= gc-cons-threshold 800000))))))

(ert-deftest passepartout-stream-test-chats-list-first-prompt-line ()
  "The saved chats list shows the first line with text of the first prompt."
  (let ((file (make-temp-file "passepartout-chat" nil ".org")))
    (unwind-protect
        (progn
          (with-temp-file file
            (insert ":PROPERTIES:\n:PASSEPARTOUT_CWD: /tmp/p/\n:END:\n"
                    "# Write under the last \"* You\" heading.\n\n"
                    "* You\n\n   \n  Fix the build.\nThen test.\n\n* passepartout\nDone.\n\n"
                    "* You\nSecond prompt\n"))
          (should (equal (passepartout-chats--summary file) '("/tmp/p/" "Fix the build."))))
      (delete-file file))))

(defconst passepartout-stream-test--plan-org
  "#+TITLE: Flight plan fp-1\n* TODO shell: rm -r old\nWhy: cleaning.\n#+NAME: action\n#+begin_src bash\nrm -r old\n#+end_src\n"
  "A plan's Org text.")

(ert-deftest passepartout-stream-test-plan-edit-outside-action-is-said ()
  "An edit to a plan's heading is not ignored silently: the person is asked."
  (puthash "fp-1" (list :plan (list :planId "fp-1" :org passepartout-stream-test--plan-org)
                        :status "pending")
           passepartout-plan--plans)
  (unwind-protect
      (let (asked)
        (cl-letf (((symbol-function 'yes-or-no-p) (lambda (q) (push q asked) nil)))
          ;; The action edited: nothing to ask.
          (passepartout-plan--check-edits
           "fp-1" (replace-regexp-in-string "^rm -r old$" "rm -r older"
                                            passepartout-stream-test--plan-org))
          (should-not asked)
          ;; The heading edited: asked, and "no" approves nothing.
          (should-error
           (passepartout-plan--check-edits
            "fp-1" (replace-regexp-in-string "^\\* TODO shell: rm -r old$" "* TODO shell: rm -r new"
                                             passepartout-stream-test--plan-org))
           :type 'user-error)
          (should (string-match-p "Only the src block under #\\+NAME: action is read back.*action as offered\\? "
                                  (car asked))))
        (cl-letf (((symbol-function 'yes-or-no-p) (lambda (_) t)))
          (should-not (passepartout-plan--check-edits
                       "fp-1" (replace-regexp-in-string "Why: cleaning\\." "Why: tidy."
                                                        passepartout-stream-test--plan-org)))))
    (remhash "fp-1" passepartout-plan--plans)))

(ert-deftest passepartout-stream-test-shell-blocks-fontified-quietly ()
  "A skill's or plan's bash block is fontified without sh-mode's message."
  (let ((org "* Tool\n#+begin_src bash\necho hi\n#+end_src\n")
        (logged (lambda (thunk)
                  (let ((messages (with-current-buffer (messages-buffer) (buffer-size))))
                    (funcall thunk)
                    (with-current-buffer (messages-buffer)
                      (string-match-p "Indentation setup for shell type"
                                      (buffer-substring (1+ messages) (point-max))))))))
    (with-temp-buffer
      (org-mode)
      (insert org)
      ;; The message this is about: plain Org says it.
      (should (funcall logged #'font-lock-ensure)))
    (with-temp-buffer
      (org-mode)
      (passepartout--quiet-src-blocks)
      (insert org)
      (should-not (funcall logged #'font-lock-ensure))
      (goto-char (point-min))
      (search-forward "echo")
      (should (get-text-property (1- (point)) 'face)))))

(ert-deftest passepartout-stream-test-skill-buffer-quiet ()
  "Opening a skill file echoes nothing about shell indentation."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name "skills/" passepartout-test--dir))
           (buffer (passepartout-skill-create "greeter" dir)))
      (unwind-protect
          (with-current-buffer buffer
            (should (assoc "bash" org-src-lang-modes))
            (should (eq (cdr (assoc "bash" org-src-lang-modes)) 'passepartout--quiet-sh)))
        (kill-buffer buffer)))))

;;; passepartout-stream-tests.el ends here
