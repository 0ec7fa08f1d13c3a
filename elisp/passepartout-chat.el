;;; passepartout-chat.el --- Org chat buffers for passepartout  -*- lexical-binding: t; -*-

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

;; One Org buffer per project, holding one daemon session.  The person
;; writes under the last "* You" heading and sends with C-c C-c (or
;; C-c RET); the answer streams under a "* passepartout" heading.
;; Reasoning and tool calls become level-2 sections whose TODO keyword is
;; the call's status (PENDING, RUNNING, DONE, FAILED); they fold when they
;; are complete.
;;
;; Streaming costs in proportion to each chunk: text is inserted at a
;; marker, tool sections are found through markers kept in a hash table
;; keyed by toolCallId, and nothing ever scans or re-renders the buffer.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'org)
(require 'passepartout-rpc)

(defvar passepartout-chat--buffers (make-hash-table :test #'equal)
  "Chat buffers by project root.")

(defvar passepartout-chat--sessions (make-hash-table :test #'equal)
  "Chat buffers by session id.")

(defvar-local passepartout-chat--root nil
  "The project directory this buffer's session is rooted at.")

(defvar-local passepartout-chat--session-id nil
  "The daemon's id for this buffer's session, or nil.")

(defvar-local passepartout-chat--connection nil
  "The connection the session belongs to; a new daemon means a new session.")

(defvar-local passepartout-chat--prompt-heading nil
  "Marker at the start of the last \"* You\" heading.")

(defvar-local passepartout-chat--prompt nil
  "Marker at the start of the prompt text, after the last \"* You\" line.")

(defvar-local passepartout-chat--stream nil
  "Marker where the running turn's output goes, or nil when idle.")

(defvar-local passepartout-chat--segment nil
  "Kind of the section the stream is in: nil, `message', `thought', `tool'.
The value may also be a cons (thought . HEADING-MARKER) for reasoning.")

(defvar-local passepartout-chat--held ""
  "Stars at a line start held back until the next chunk shows what follows.")

(defvar-local passepartout-chat--tools nil
  "Tool call sections by toolCallId: a plist of markers and state.")

(defvar-local passepartout-chat--plan nil
  "Markers (START . END) around this turn's plan section, or nil.")

(defvar-local passepartout-chat--status nil
  "The last `_passepartout/session/status' params for this session.")

(defconst passepartout-chat--keywords
  '((sequence "PENDING" "RUNNING" "WAITING" "|" "DONE" "FAILED"))
  "Org TODO keywords showing tool call status.")

(defconst passepartout-chat--tool-keywords
  '(("pending" . "PENDING") ("in_progress" . "RUNNING")
    ("completed" . "DONE") ("failed" . "FAILED"))
  "ACP tool call status to Org keyword.")

;;;; Mode

(defvar passepartout-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c RET") #'passepartout-chat-send)
    (define-key map (kbd "C-c C-k") #'passepartout-chat-cancel)
    map)
  "Keymap for `passepartout-chat-mode'.
\\[org-ctrl-c-ctrl-c] sends too, when point is in the prompt (through
`org-ctrl-c-ctrl-c-hook', so Org keeps it elsewhere).")

(define-derived-mode passepartout-chat-mode org-mode "passepartout"
  "Major mode for chatting with passepartout in Org.
Write under the last \"* You\" heading; \\[passepartout-chat-send] or
\\[org-ctrl-c-ctrl-c] sends, \\[passepartout-chat-cancel] cancels the running turn.

\\{passepartout-chat-mode-map}"
  (setq-local org-todo-keywords passepartout-chat--keywords)
  (org-set-regexps-and-options)
  (setq-local passepartout-chat--tools (make-hash-table :test #'equal))
  (setq-local mode-line-process '(:eval (passepartout-chat--mode-line)))
  ;; Code the model writes is shown, never run by a stray C-c C-c.
  (setq-local org-confirm-babel-evaluate t)
  (add-hook 'org-ctrl-c-ctrl-c-hook #'passepartout-chat--ctrl-c-ctrl-c nil t)
  (add-hook 'kill-buffer-hook #'passepartout-chat--forget nil t))

(defun passepartout-chat--ctrl-c-ctrl-c ()
  "Send the prompt if point is in it; otherwise leave the key to Org.
Run from `org-ctrl-c-ctrl-c-hook'."
  (when (and passepartout-chat--prompt
             (>= (point) passepartout-chat--prompt))
    (passepartout-chat-send)
    t))

(defun passepartout-chat--forget ()
  "Forget this buffer's session; cancel its turn."
  (when passepartout-chat--stream
    (ignore-errors (passepartout-chat-cancel)))
  (when passepartout-chat--session-id
    (remhash passepartout-chat--session-id passepartout-chat--sessions))
  (when (eq (gethash passepartout-chat--root passepartout-chat--buffers)
            (current-buffer))
    (remhash passepartout-chat--root passepartout-chat--buffers)))

(defun passepartout-chat--mode-line ()
  "Return the mode-line text: session state, provider and tokens."
  (let* ((status passepartout-chat--status)
         (state (cond ((not (passepartout--live-connection)) "stopped")
                      (status (plist-get status :state))
                      (passepartout-chat--stream "sent")
                      (t "idle")))
         (provider (plist-get status :provider))
         (in (plist-get status :inputTokens))
         (out (plist-get status :outputTokens)))
    (concat " [" state
            (if (and provider (not (string-empty-p provider)))
                (concat " " (car (split-string provider " (")))
              "")
            (if (or in out)
                (format " %s↑%s↓" (or in 0) (or out 0))
              "")
            "]")))

;;;; Buffers and sessions

(defun passepartout-chat--buffer-name (root)
  "Name of the chat buffer for ROOT."
  (format "*passepartout %s*"
          (file-name-nondirectory (directory-file-name root))))

(defun passepartout-chat-buffer (root)
  "Return the chat buffer for project ROOT, creating it if needed."
  (let ((root (file-name-as-directory (expand-file-name root))))
    (or (let ((b (gethash root passepartout-chat--buffers)))
          (and (buffer-live-p b) b))
        (let ((buffer (generate-new-buffer (passepartout-chat--buffer-name root))))
          (with-current-buffer buffer
            (passepartout-chat-mode)
            (setq passepartout-chat--root root)
            (setq default-directory root)
            (let ((inhibit-read-only t))
              (insert (format "#+title: passepartout: %s\n" (abbreviate-file-name root))
                      "# Write under the last \"* You\" heading. "
                      "C-c C-c sends, C-c C-k cancels.\n"))
            (passepartout-chat--new-prompt))
          (puthash root buffer passepartout-chat--buffers)
          buffer))))

(defun passepartout-chat--ensure-session ()
  "Give the current chat buffer a session on a live daemon; return its id."
  (let ((conn (passepartout--ensure-connection)))
    (unless (and passepartout-chat--session-id
                 (eq passepartout-chat--connection conn))
      (let* ((old passepartout-chat--session-id)
             (result (jsonrpc-request conn :session/new
                                      (list :cwd (directory-file-name
                                                  passepartout-chat--root)
                                            :mcpServers []))))
        (when old
          (remhash old passepartout-chat--sessions)
          (passepartout-chat--note
           (format "New session %s (the previous one ended with its daemon)."
                   (plist-get result :sessionId))))
        (setq passepartout-chat--session-id (plist-get result :sessionId)
              passepartout-chat--connection conn
              passepartout-chat--status nil)
        (puthash passepartout-chat--session-id (current-buffer)
                 passepartout-chat--sessions)))
    passepartout-chat--session-id))

(defun passepartout-chat--session-buffer (params)
  "Return the live chat buffer of the session named in PARAMS, or nil."
  (let ((b (gethash (plist-get params :sessionId) passepartout-chat--sessions)))
    (and (buffer-live-p b) b)))

;;;; Inserting text

(defun passepartout-chat--new-prompt ()
  "Insert a fresh \"* You\" heading at the end and move the prompt markers."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char (point-max))
      (unless (bolp) (insert "\n"))
      (unless (or (bobp) (save-excursion (forward-line -1) (looking-at-p "^$")))
        (insert "\n"))
      (setq passepartout-chat--prompt-heading (copy-marker (point) t))
      (insert "* You\n")
      (setq passepartout-chat--prompt (copy-marker (point))))))

(defun passepartout-chat--insert (text)
  "Insert TEXT at the stream marker; windows at the end follow it."
  (let* ((stream passepartout-chat--stream)
         (inhibit-read-only t)
         (here-at-end (= (point) stream))
         (followers (cl-remove-if-not
                     (lambda (w) (= (window-point w) stream))
                     (get-buffer-window-list nil nil t))))
    (save-excursion
      (goto-char stream)
      (insert text))
    (when here-at-end (goto-char stream))
    (dolist (w followers) (set-window-point w stream))))

(defun passepartout-chat--org-safe (text)
  "Return TEXT with line-start stars that would open an Org heading demoted.
A Markdown bullet \"* item\" would otherwise end the answer's section.
Stars at the end of TEXT wait in `passepartout-chat--held' until the
next chunk shows whether a space follows them.  Cost: linear in TEXT."
  (let* ((text (concat passepartout-chat--held text))
         (bol (or (= passepartout-chat--stream (point-min))
                  (eq (char-before passepartout-chat--stream) ?\n)))
         (start 0)
         (out nil))
    (setq passepartout-chat--held "")
    (while (string-match "^\\*+" text start)
      (let ((mb (match-beginning 0))
            (me (match-end 0)))
        (if (and (= mb 0) (not bol))
            (progn (push (substring text start me) out) (setq start me))
          (push (substring text start mb) out)
          (cond ((= me (length text))
                 (setq passepartout-chat--held (substring text mb))
                 (setq start me))
                ((memq (aref text me) '(?\s ?\t))
                 (push (concat (make-string (* 2 (- me mb 1)) ?\s) "-") out)
                 (setq start me))
                (t (push (substring text mb me) out)
                   (setq start me))))))
    (push (substring text start) out)
    (apply #'concat (nreverse out))))

(defun passepartout-chat--fold (heading)
  "Fold the Org subtree of the heading at position HEADING."
  (save-excursion
    (goto-char heading)
    (when (org-at-heading-p)
      (funcall (if (fboundp 'org-fold-subtree) 'org-fold-subtree 'org-flag-subtree)
               t))))

(defun passepartout-chat--close-segment ()
  "End the current section: flush held text, fold reasoning."
  (unless (string-empty-p passepartout-chat--held)
    (let ((held passepartout-chat--held))
      (setq passepartout-chat--held "")
      (passepartout-chat--insert held)))
  (when (eq (car-safe passepartout-chat--segment) 'thought)
    (passepartout-chat--ensure-newline)
    (passepartout-chat--fold (cdr passepartout-chat--segment)))
  (setq passepartout-chat--segment nil))

(defun passepartout-chat--ensure-newline ()
  "Make the stream start on a fresh line."
  (unless (eq (char-before passepartout-chat--stream) ?\n)
    (passepartout-chat--insert "\n")))

(defun passepartout-chat--open-heading (title)
  "Insert a level-2 heading TITLE at the stream; return a marker at it."
  (passepartout-chat--ensure-newline)
  (let ((heading (copy-marker passepartout-chat--stream)))
    (passepartout-chat--insert (concat "** " title "\n"))
    heading))

(defun passepartout-chat-insert-message (text)
  "Append answer TEXT to the running turn of the current chat buffer."
  (unless (eq passepartout-chat--segment 'message)
    (let ((had-sections (not (null passepartout-chat--segment))))
      (passepartout-chat--close-segment)
      (when (or had-sections
                (not (eq (char-before passepartout-chat--stream) ?\n))
                (save-excursion
                  (goto-char passepartout-chat--stream)
                  (forward-line -1)
                  (not (looking-at-p "^\\* passepartout$"))))
        (passepartout-chat--open-heading "Answer")))
    (setq passepartout-chat--segment 'message))
  (passepartout-chat--insert (passepartout-chat--org-safe text)))

(defun passepartout-chat-insert-thought (text)
  "Append reasoning TEXT to the running turn of the current chat buffer."
  (unless (eq (car-safe passepartout-chat--segment) 'thought)
    (passepartout-chat--close-segment)
    (setq passepartout-chat--segment
          (cons 'thought (passepartout-chat--open-heading "Reasoning"))))
  (passepartout-chat--insert (passepartout-chat--org-safe text)))

(defun passepartout-chat--note (text)
  "Insert TEXT as a fixed-width note: in the running turn, else before the prompt."
  (let ((inhibit-read-only t)
        (line (concat ": " (replace-regexp-in-string "\n" "\n: " text) "\n")))
    (if passepartout-chat--stream
        (progn (passepartout-chat--close-segment)
               (passepartout-chat--ensure-newline)
               (passepartout-chat--insert line))
      (save-excursion
        (goto-char passepartout-chat--prompt-heading)
        (insert line "\n")))))

(defun passepartout-chat--text-of (content)
  "Return the text of an ACP content block CONTENT, or nil."
  (and (equal (plist-get content :type) "text")
       (plist-get content :text)))

(defun passepartout-chat--example (text)
  "Return TEXT as an Org example block, escaped."
  (concat "#+begin_example\n"
          (org-escape-code-in-string (string-trim-right text "\n+"))
          "\n#+end_example\n"))

;;;; Tool calls

(defun passepartout-chat--tool-text (update)
  "Return the text results of tool call UPDATE, joined."
  (let ((texts
         (cl-loop for item across (plist-get update :content)
                  for text = (pcase (plist-get item :type)
                               ("content" (passepartout-chat--text-of
                                           (plist-get item :content)))
                               ("diff" (format "new text of %s:\n%s"
                                               (plist-get item :path)
                                               (plist-get item :newText))))
                  when text collect text)))
    (and texts (string-join texts "\n"))))

(defun passepartout-chat--json (value)
  "Return VALUE, parsed JSON, as compact JSON text."
  (condition-case nil
      (json-serialize value :null-object nil :false-object :json-false)
    (error (prin1-to-string value))))

(defun passepartout-chat--tool-start (update)
  "Insert a section for the new tool call UPDATE; remember its markers."
  (passepartout-chat--close-segment)
  (passepartout-chat--ensure-newline)
  (let* ((id (plist-get update :toolCallId))
         (keyword (or (cdr (assoc (plist-get update :status)
                                  passepartout-chat--tool-keywords))
                      "PENDING"))
         (heading (copy-marker passepartout-chat--stream))
         (input (plist-get update :rawInput)))
    (passepartout-chat--insert
     (concat "** " keyword " "
             ;; A heading is one line, whatever the model put in a title.
             (replace-regexp-in-string
              "[\n\r]+" " "
              (or (plist-get update :title) (plist-get update :name) "tool call"))
             "\n:PROPERTIES:\n:TOOL_CALL_ID: " id "\n"
             (if (plist-get update :kind)
                 (format ":KIND: %s\n" (plist-get update :kind))
               "")
             ":END:\n"
             (if input
                 (concat "#+begin_src json\n"
                         (org-escape-code-in-string
                          (passepartout-chat--json input))
                         "\n#+end_src\n")
               "")))
    (puthash id (list :heading heading
                      :keyword (copy-marker (+ heading 3))
                      :current keyword
                      :end (copy-marker passepartout-chat--stream))
             passepartout-chat--tools)
    (setq passepartout-chat--segment 'tool)
    (passepartout-chat--tool-update update)))

(defun passepartout-chat--tool-update (update)
  "Update the tool call section of UPDATE in place."
  (let* ((id (plist-get update :toolCallId))
         (tool (gethash id passepartout-chat--tools)))
    (if (not tool)
        (passepartout-chat--tool-start update)
      (let ((inhibit-read-only t)
            (keyword (cdr (assoc (plist-get update :status)
                                 passepartout-chat--tool-keywords)))
            (text (passepartout-chat--tool-text update)))
        (when (and keyword (not (equal keyword (plist-get tool :current))))
          (save-excursion
            (goto-char (plist-get tool :keyword))
            (delete-char (length (plist-get tool :current)))
            (insert keyword))
          (plist-put tool :current keyword))
        (when text
          (save-excursion
            (let ((end (plist-get tool :end)))
              (goto-char end)
              (insert (passepartout-chat--example text))
              (set-marker end (point)))))
        (when (member keyword '("DONE" "FAILED"))
          (passepartout-chat--fold (plist-get tool :heading)))))))

(defun passepartout-chat--tool-waiting (tool-call-id plan-id)
  "Mark TOOL-CALL-ID's section as waiting for flight plan PLAN-ID."
  (when-let ((tool (gethash tool-call-id passepartout-chat--tools)))
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (plist-get tool :keyword))
        (delete-char (length (plist-get tool :current)))
        (insert "WAITING")
        (plist-put tool :current "WAITING")
        (let ((end (plist-get tool :end)))
          (goto-char end)
          (let ((start (point-marker)))
            (insert (format "Waiting for flight plan %s (M-x passepartout-plans).\n"
                            plan-id))
            (set-marker end (point))
            (plist-put tool :plan-line (cons start (copy-marker (1- (point)))))))))))

(defun passepartout-chat--tool-plan-resolved (tool-call-id plan-id status)
  "Say in TOOL-CALL-ID's section that flight plan PLAN-ID ended as STATUS."
  (when-let* ((tool (gethash tool-call-id passepartout-chat--tools))
              (line (plist-get tool :plan-line)))
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (car line))
        (delete-region (car line) (cdr line))
        (insert (format "Flight plan %s: %s." plan-id status))))))

;;;; The agent's plan

(defun passepartout-chat--plan-update (entries)
  "Show the agent's plan ENTRIES as a checklist, replacing the last one."
  (let ((inhibit-read-only t)
        (text (mapconcat
               (lambda (e)
                 (format "- [%s] %s\n"
                         (pcase (plist-get e :status)
                           ("completed" "X") ("in_progress" "-") (_ " "))
                         (plist-get e :content)))
               entries "")))
    (if passepartout-chat--plan
        (save-excursion
          (delete-region (car passepartout-chat--plan) (cdr passepartout-chat--plan))
          (goto-char (car passepartout-chat--plan))
          (insert text))
      (passepartout-chat--close-segment)
      (passepartout-chat--open-heading "Plan")
      (let ((start (copy-marker passepartout-chat--stream)))
        (passepartout-chat--insert text)
        (setq passepartout-chat--plan
              (cons start (copy-marker passepartout-chat--stream)))
        (setq passepartout-chat--segment 'plan)))))

;;;; Turns

(defun passepartout-chat-begin-turn ()
  "Open the answer section of a new turn at the end of the buffer."
  (let ((inhibit-read-only t))
    (goto-char (point-max))
    (unless (bolp) (insert "\n"))
    (insert "\n* passepartout\n")
    (setq passepartout-chat--stream (copy-marker (point) t)
          passepartout-chat--segment nil
          passepartout-chat--held ""
          passepartout-chat--plan nil)))

(defun passepartout-chat-end-turn (&optional note)
  "Finish the running turn, with NOTE if non-nil, and open a new prompt."
  (when passepartout-chat--stream
    (when note (passepartout-chat--note note))
    (passepartout-chat--close-segment)
    (let ((at-end (>= (point) passepartout-chat--stream)))
      (set-marker passepartout-chat--stream nil)
      (setq passepartout-chat--stream nil
            passepartout-chat--plan nil)
      (passepartout-chat--new-prompt)
      (when at-end (goto-char (point-max))))
    (force-mode-line-update)))

(defun passepartout-chat--stop-note (reason)
  "Return the note for stop REASON, or nil for a normal end."
  (pcase reason
    ("end_turn" nil)
    ("cancelled" "Cancelled.")
    ("max_turn_requests" "Stopped: the turn reached its round limit.")
    ("max_tokens" "Stopped: the model reached its token limit.")
    ("refusal" "The model refused.")
    (_ (format "Stopped: %s." reason))))

(defun passepartout-chat-send ()
  "Send the text under the last \"* You\" heading as a prompt."
  (interactive)
  (when passepartout-chat--stream
    (user-error "A turn is running; C-c C-k cancels it"))
  (let ((text (string-trim (buffer-substring-no-properties
                            passepartout-chat--prompt (point-max)))))
    (when (string-empty-p text)
      (user-error "Write a prompt under the last \"* You\" heading first"))
    (let ((session (passepartout-chat--ensure-session))
          (buffer (current-buffer)))
      (passepartout-chat-begin-turn)
      (passepartout--request-async
       :session/prompt
       (list :sessionId session
             :prompt (vector (list :type "text" :text text)))
       :timeout nil
       :success-fn
       (lambda (result)
         (when (buffer-live-p buffer)
           (with-current-buffer buffer
             (passepartout-chat-end-turn
              (passepartout-chat--stop-note (plist-get result :stopReason))))))
       :error-fn
       (lambda (error)
         (when (buffer-live-p buffer)
           (with-current-buffer buffer
             (passepartout-chat-end-turn
              ;; A dead daemon is reported by the death hook.
              (unless (eql (plist-get error :code) -1)
                (concat "Error: " (passepartout--error-message error)))))))))))

(defun passepartout-chat-cancel ()
  "Cancel the running turn of this chat buffer."
  (interactive)
  (unless passepartout-chat--stream
    (user-error "No turn is running"))
  (passepartout--notify :session/cancel
                        (list :sessionId passepartout-chat--session-id)))

;;;; Notifications

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql 'session/update)) params)
  "Show the session update in PARAMS in its chat buffer."
  (when-let ((buffer (passepartout-chat--session-buffer params)))
    (with-current-buffer buffer
      (let ((update (plist-get params :update)))
        ;; Updates after the turn ended (or before it began) have no place.
        (when passepartout-chat--stream
          (pcase (plist-get update :sessionUpdate)
            ("agent_message_chunk"
             (when-let ((text (passepartout-chat--text-of (plist-get update :content))))
               (passepartout-chat-insert-message text)))
            ("agent_thought_chunk"
             (when-let ((text (passepartout-chat--text-of (plist-get update :content))))
               (passepartout-chat-insert-thought text)))
            ("tool_call" (passepartout-chat--tool-start update))
            ("tool_call_update" (passepartout-chat--tool-update update))
            ("plan" (passepartout-chat--plan-update (plist-get update :entries)))))))))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/session/status)) params)
  "Show the session status in PARAMS in its chat buffer's mode line."
  (when-let ((buffer (passepartout-chat--session-buffer params)))
    (with-current-buffer buffer
      (setq passepartout-chat--status params)
      (force-mode-line-update))))

(defun passepartout-chat--daemon-died (_conn reason)
  "Tell every chat buffer that the daemon stopped, for REASON."
  (maphash
   (lambda (_id buffer)
     (when (buffer-live-p buffer)
       (with-current-buffer buffer
         (passepartout-chat-end-turn)
         (passepartout-chat--note
          (format "The daemon %s. M-x passepartout starts it again."
                  (if (equal reason "stopped") "was stopped" reason)))
         (force-mode-line-update))))
   passepartout-chat--sessions))

(add-hook 'passepartout-connection-died-hook #'passepartout-chat--daemon-died)

(provide 'passepartout-chat)
;;; passepartout-chat.el ends here
