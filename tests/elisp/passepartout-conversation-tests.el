;;; passepartout-conversation-tests.el --- ERT tests: the chat is a conversation (issue 18)  -*- lexical-binding: t; -*-

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

;; The Emacs items of issue 18, each numbered as in the issue, against
;; the real daemon and fake provider: what the person types while an
;; answer streams never lands in it, and the saved chat holds exactly
;; the answer the daemon journalled (9); undo from the history asks and
;; reverts the buffers visiting what it changed (10); compaction shows as
;; one line (11); the keys, headings and windows of flight plans, and
;; C-x C-s (12).

;;; Code:

(require 'ert)
(require 'passepartout-test-support)
(require 'passepartout-history)

(defun passepartout-conversation-test--journal-answers ()
  "The assistant answers the daemon journalled, oldest first."
  (let* ((dir (expand-file-name "state/sessions/" passepartout-test--dir))
         (files (directory-files dir t "\\.jsonl\\'")))
    (should (= (length files) 1))
    (with-temp-buffer
      (let ((coding-system-for-read 'utf-8-unix))
        (insert-file-contents (car files)))
      (cl-loop while (re-search-forward "^\\(.+\\)\n" nil t)
               for record = (json-parse-string (match-string 1) :object-type 'plist
                                               :null-object nil :false-object nil)
               for message = (plist-get record :message)
               when (and (equal (plist-get record :kind) "message")
                         (equal (plist-get message :role) "assistant"))
               collect (plist-get message :content)))))

(defun passepartout-conversation-test--saved (chat)
  "The text of CHAT's saved file."
  (with-temp-buffer
    (let ((coding-system-for-read 'utf-8-unix))
      (insert-file-contents (buffer-local-value 'passepartout-chat--file chat)))
    (buffer-string)))

;;;; Item 9: typing while an answer streams

(defconst passepartout-conversation-test--chunk-count 500
  "Chunks of the one-line answer of 1,000,000 characters.")

(defun passepartout-conversation-test--big-chunk (i)
  "The I-th 2,000-character piece of a one-line answer."
  (let ((s (format "word %06d * not a heading, `code' and 100%% text. " i)))
    (substring (apply #'concat (make-list (1+ (/ 2000 (length s))) s)) 0 2000)))

(ert-deftest passepartout-conversation-test-typing-while-streaming ()
  "Keys typed while 1 MB streams, C-a C-k included, stay in the prompt (item 9).
The answer in the saved chat equals the daemon's journal byte for byte."
  (passepartout-test-with-daemon
      (list `(:type "open_ai" :delay_ms 4 :done t
                    :chunks ,(vconcat
                              (cl-loop for i below passepartout-conversation-test--chunk-count
                                       collect (passepartout-test--chunk
                                                (list :content (passepartout-conversation-test--big-chunk i))))
                              (list (passepartout-test--chunk (make-hash-table) "stop")))))
    (let ((chat (passepartout-test--chat project)))
      (delete-other-windows)
      (switch-to-buffer chat)
      (goto-char (point-max))
      (execute-kbd-macro (kbd "W r i t e SPC a SPC l o n g SPC a n s w e r . C-c C-c"))
      (should-not (passepartout-test--idle-p chat))
      ;; Keys at three moments of the stream, as a person types them.
      (dolist (step '((100000 . "d r a f t SPC o n e")
                      (400000 . "C-a C-k")
                      (700000 . "s e c o n d SPC d r a f t")))
        (passepartout-test--wait-for
            (or (> (buffer-size chat) (car step)) (passepartout-test--idle-p chat))
          60 "more of the answer")
        (should-not (passepartout-test--idle-p chat))
        (execute-kbd-macro (kbd (cdr step))))
      ;; Typing inside the answer is refused, not mixed into it.
      (with-current-buffer chat
        (save-excursion
          (goto-char (marker-position passepartout-chat--stream))
          (should-error (insert "x") :type 'text-read-only)
          (forward-line 0)
          (should-error (kill-line) :type 'text-read-only)))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 120 "the end of the turn")
      ;; A megabyte is saved in the background, in pieces.
      (passepartout-test--wait-for (not (buffer-modified-p chat)) 30 "the chat saved")
      (let* ((journal (passepartout-conversation-test--journal-answers))
             (saved (passepartout-conversation-test--saved chat)))
        (should (= (length journal) 1))
        (should (= (length (car journal)) 1000000))
        (should (string-match "^\\* passepartout\n" saved))
        (let ((start (match-end 0)))
          (should (string-match "\n\n\\* You\n\\(.*\\)\\'" saved start))
          (should (string= (substring saved start (match-beginning 0)) (car journal)))
          (should (equal (match-string 1 saved) "second draft")))
        ;; The buffer shows what was saved.
        (should (string= (passepartout-test--text chat) saved))))))

;;;; Item 12: keys, headings and windows

(ert-deftest passepartout-conversation-test-c-c-ret-sends ()
  "C-c RET (which is C-c C-m) sends the prompt; the menu is on C-c C-s (item 12)."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Hi there."))
    (let ((chat (passepartout-test--chat project)))
      (delete-other-windows)
      (switch-to-buffer chat)
      (should (eq (key-binding (kbd "C-c RET")) #'passepartout-chat-send))
      (should (eq (key-binding (kbd "C-c C-m")) #'passepartout-chat-send))
      (should (eq (key-binding (kbd "C-c C-s")) #'passepartout-menu))
      (goto-char (point-max))
      (execute-kbd-macro (kbd "H e l l o C-c RET"))
      (should-not (passepartout-test--idle-p chat))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (string-match-p "^Hi there\\.$" (passepartout-test--text chat))))))

(ert-deftest passepartout-conversation-test-save-key-writes-the-chat-file ()
  "C-x C-s in a chat writes its chat file and offers nothing in the project (item 12)."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Saved?"))
    (let ((chat (passepartout-test--chat project)))
      (delete-other-windows)
      (switch-to-buffer chat)
      (goto-char (point-max))
      (execute-kbd-macro (kbd "a SPC d r a f t"))
      (should (buffer-modified-p chat))
      ;; Any question would read from the terminal and fail the test.
      (cl-letf (((symbol-function 'read-file-name)
                 (lambda (&rest _) (ert-fail "C-x C-s asked for a file name"))))
        (execute-kbd-macro (kbd "C-x C-s")))
      (should-not (buffer-modified-p chat))
      (should-not (buffer-file-name chat))
      (should (string-suffix-p "* You\na draft" (passepartout-conversation-test--saved chat)))
      (should (equal (directory-files project nil "\\`[^.]") nil)))))

(ert-deftest passepartout-conversation-test-plan-in-chat ()
  "A plan takes no window and prints no mode chatter; C-c C-c on its WAITING
heading approves; the heading shows the edited action that ran (item 12)."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" '(:command "rm -r old"))
            (passepartout-test--text-reply "Done."))
    (make-directory (expand-file-name "old" project))
    (let* ((passepartout-plan-display
            (eval (car (get 'passepartout-plan-display 'standard-value)) t))
           (chat (passepartout-test--chat project))
           (other (get-buffer-create "*the person's work*")))
      (delete-other-windows)
      (switch-to-buffer chat)
      (split-window)
      (set-window-buffer (next-window) other)
      (let ((windows (mapcar #'window-buffer (window-list))))
        (with-current-buffer (messages-buffer)
          (let ((inhibit-read-only t)) (erase-buffer)))
        (goto-char (point-max))
        (insert "Remove old/")
        (passepartout-chat-send)
        (let ((plan-id (passepartout-test--wait-for
                           (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan")))
          ;; No window was taken.
          (should (equal (mapcar #'window-buffer (window-list)) windows))
          ;; The person edits the action in the plan buffer, which is
          ;; fontified as they read it: no "Indentation setup" chatter.
          (with-current-buffer (passepartout-plan-buffer plan-id)
            (font-lock-ensure)
            (goto-char (point-min))
            (re-search-forward "^#\\+begin_src bash")
            (re-search-forward (regexp-quote "rm -r old"))
            (replace-match "mkdir made-by-edit" t t))
          (should-not (string-match-p "Indentation setup"
                                      (with-current-buffer (messages-buffer) (buffer-string))))
          ;; C-c C-c on the WAITING heading approves (with the edit).
          (with-current-buffer chat
            (goto-char (point-min))
            (re-search-forward "^\\*\\* WAITING ")
            (forward-line 0)
            (execute-kbd-macro (kbd "C-c C-c")))
          (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
          (should (file-directory-p (expand-file-name "made-by-edit" project)))
          (should (file-directory-p (expand-file-name "old" project)))
          (with-current-buffer chat
            (goto-char (point-min))
            (should (re-search-forward "^\\*\\* [A-Z]+ \\(.*\\)$" nil t))
            (should (string-match-p "mkdir made-by-edit" (match-string 1)))
            (should-not (string-match-p "rm -r old" (match-string 1)))))))))

;;;; Item 11: compaction

(defmacro passepartout-conversation-test--with-small-window (&rest body)
  "Run BODY with the daemon's context window so small that a second turn compacts.
Not smaller: the system prompt and the tools take about 900 tokens, and a
conversation still over the window after compaction is refused."
  (declare (indent 0))
  `(let* ((config (make-temp-file "passepartout-config" nil ".toml"
                                  "[context]\ndefault_window = 1600\n"))
          (process-environment (cons (concat "PASSEPARTOUT_CONFIG=" config)
                                     process-environment)))
     (unwind-protect (progn ,@body)
       (delete-file config))))

(defconst passepartout-conversation-test--long-answer
  (mapconcat (lambda (i) (format "Line %d of a long first answer." i))
             (number-sequence 1 80) "\n")
  "A first answer that fills the small window.")

(ert-deftest passepartout-conversation-test-compaction-is-one-line ()
  "Compaction shows as one line with the summary's size, not the summary (item 11)."
  (passepartout-conversation-test--with-small-window
    (passepartout-test-with-daemon
        (list (passepartout-test--text-reply passepartout-conversation-test--long-answer)
              (passepartout-test--text-reply (make-string 2000 ?s))
              (passepartout-test--text-reply "Second answer."))
      (let ((chat (passepartout-test--chat project)))
        (passepartout-test--send chat "First")
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (passepartout-test--send chat "Second")
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (let ((text (passepartout-test--text chat)))
          (should (string-match-p "^Second answer\\.$" text))
          ;; One line, the summary's size in it; the summary is not shown.
          (should (= 1 (cl-count-if (lambda (l) (string-match-p "ompact" l))
                                    (split-string text "\n"))))
          (should (string-match
                   "^: Compacted the conversation from [0-9.k]+ to [0-9.k]+ tokens (window 1.6k): earlier turns replaced by a summary of about \\([0-9]+\\) tokens"
                   text))
          ;; The model wrote a 2,000-character (500-token) summary; the
          ;; daemon keeps at most an eighth of the window, and at least 256
          ;; tokens, so the line reports the bounded size.
          (should (<= 200 (string-to-number (match-string 1 text)) 300))
          (should-not (string-match-p "sssss" text)))))))

(ert-deftest passepartout-conversation-test-cancel-compaction ()
  "While the history is compacted, the chat says so and C-c C-k ends the turn (item 11)."
  (passepartout-conversation-test--with-small-window
    (passepartout-test-with-daemon
        (list (passepartout-test--text-reply passepartout-conversation-test--long-answer)
              (passepartout-test--hang-reply)
              (passepartout-test--text-reply "An answer nobody asked for."))
      (let ((chat (passepartout-test--chat project)))
        (passepartout-test--send chat "First")
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (passepartout-test--send chat "Second")
        (passepartout-test--wait-for
            (string-match-p "^: Compacting the conversation" (passepartout-test--text chat))
          30 "the compaction line")
        (with-current-buffer chat
          (goto-char (point-max))
          (execute-kbd-macro (kbd "C-c C-k")))
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (should (string-match-p "^: Cancelled\\.$" (passepartout-test--text chat)))
        ;; Only the first answer and the summary were asked of the model.
        (should (= (length (passepartout-test--requests)) 2))
        (should-not (string-match-p "nobody asked" (passepartout-test--text chat)))))))

(provide 'passepartout-conversation-tests)
;;; passepartout-conversation-tests.el ends here
