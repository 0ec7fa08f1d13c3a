;;; passepartout-plan.el --- Flight plan buffers for passepartout  -*- lexical-binding: t; -*-

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

;; When a gate says "ask", the daemon sends `_passepartout/plan/offer'
;; with the plan as an Org document.  It waits in its chat (see
;; passepartout-chat.el) and in a buffer `*passepartout plan fp-...*',
;; which takes no window unless `passepartout-plan-display' is `pop'.
;; The buffer is in `passepartout-plan-mode': C-c C-c
;; approves (with the buffer's text, so an edited src block is what
;; runs, after the daemon gates it again), C-c C-k rejects with an
;; optional reason for the model.  `_passepartout/plan/resolved' shows
;; the outcome and makes the buffer read-only.
;;
;; Plans are tracked in a hash table by plan id, never found by searching
;; buffers.  `passepartout-plans' lists the pending ones.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'org)
(require 'tabulated-list)
(require 'passepartout-rpc)

(defcustom passepartout-plan-display 'notify
  "What to do when a flight plan arrives.
`notify' (the default) says so in the echo area: the plan already waits
in its chat, where \\<passepartout-chat-plan-map>\\[passepartout-chat-approve-plan] approves it, and \\[passepartout-plans] lists them
all; no window is taken from you.  `pop' also shows its buffer at once
\(without selecting it)."
  :type '(choice (const :tag "Show the plan" pop)
                 (const :tag "Only tell me" notify))
  :group 'passepartout)

(declare-function passepartout-chat--tool-waiting "passepartout-chat"
                  (tool-call-id plan-id &optional org))
(declare-function passepartout-chat--tool-plan-resolved "passepartout-chat"
                  (tool-call-id plan-id status &optional edited))
(declare-function passepartout-chat--tool-retitle "passepartout-chat"
                  (tool-call-id title))
(declare-function passepartout-chat-plan-buffer "passepartout-chat" (plan))
(declare-function passepartout-chat-resolve-in-file "passepartout-chat"
                  (session-id plan-id status))
(declare-function passepartout-plans "passepartout")
(declare-function passepartout-events "passepartout")
(declare-function passepartout-restart "passepartout")
(defvar passepartout-chat--sessions)

(defvar passepartout-plan--plans (make-hash-table :test #'equal)
  "Known flight plans by plan id.
Each value is a plist: :plan (the daemon's plan object), :buffer,
:session and :status (\"pending\", \"approving\", \"approved\", ...).")

(defvar-local passepartout-plan--id nil
  "The plan id shown in this buffer.")

(defvar-local passepartout-plan--shown nil
  "The plan's Org text as this buffer last showed it, before any edit.")

(defvar passepartout-plan-offered-hook nil
  "Hook run with the plan id after a flight plan was offered.")

(defvar passepartout-plan-resolved-hook nil
  "Hook run with the plan id after a flight plan was resolved.")

;;;; Mode

(defvar passepartout-plan-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'passepartout-plan-approve)
    (define-key map (kbd "C-c C-k") #'passepartout-plan-reject)
    (define-key map (kbd "C-c C-p") #'passepartout-plans)
    map)
  "Keymap for `passepartout-plan-mode'.")

(easy-menu-define passepartout-plan-menu passepartout-plan-mode-map
  "Menu for passepartout flight plan buffers."
  '("Flight-plan"
    ["Approve (with my edits)" passepartout-plan-approve]
    ["Reject..." passepartout-plan-reject]
    "---"
    ["All plans waiting" passepartout-plans]
    ["Events (JSON-RPC log)" passepartout-events]
    ["Restart the daemon" passepartout-restart]))

(define-derived-mode passepartout-plan-mode org-mode "Flight-plan"
  "Major mode for a passepartout flight plan.
Read why the agent wants the action, edit its src block if needed, then
\\[passepartout-plan-approve] approves and \\[passepartout-plan-reject] rejects.
Approving never evaluates the block in Emacs.  Undo only undoes your
own edits: the plan's text is never in the undo list.

Other commands (also in the Flight-plan menu):
- \\[passepartout-plans] `passepartout-plans': every plan waiting for you.
- `passepartout-events': the JSON-RPC messages (when turned on).
- `passepartout-restart': stop the daemon and start it again; pending
  plans are kept and offered again.

\\{passepartout-plan-mode-map}"
  ;; The action is for the daemon's sandbox, not for Emacs: refuse Babel.
  (setq-local org-babel-default-header-args
              (cons '(:eval . "never")
                    (assq-delete-all :eval (copy-alist org-babel-default-header-args))))
  (setq-local header-line-format
              '(:eval (passepartout-plan--header-line)))
  (passepartout--quiet-src-blocks))

(defun passepartout-plan--header-line ()
  "Return the header line: the plan's status, the keys, the last error."
  (let* ((entry (gethash passepartout-plan--id passepartout-plan--plans))
         (status (or (plist-get entry :status) "unknown"))
         (error (plist-get entry :error)))
    (concat
     (if (equal status "pending")
         (substitute-command-keys
          "Flight plan: \\[passepartout-plan-approve] approve, \\[passepartout-plan-reject] reject")
       (format "Flight plan %s: %s" passepartout-plan--id status))
     (if error (propertize (concat "  " error) 'face 'error) ""))))

(defun passepartout-plan--set-error (id message)
  "Remember MESSAGE, the daemon's last refusal for plan ID, or clear it."
  (when-let ((entry (gethash id passepartout-plan--plans)))
    (puthash id (plist-put entry :error message) passepartout-plan--plans)))

(defun passepartout-plan--refresh-status (id)
  "Ask the daemon for the status of plan ID and show it."
  (passepartout--request-async
   :_passepartout/plans/list nil
   :timeout 10
   :success-fn
   (lambda (result)
     (let ((plan (cl-find id (plist-get result :plans)
                          :key (lambda (p) (plist-get p :planId)) :test #'equal)))
       (passepartout-plan--set-status
        id (if plan (plist-get plan :status) "decided elsewhere"))))
   :error-fn #'ignore))

;;;; Buffers

(defun passepartout-plan--buffer-name (id)
  "Name of the buffer showing plan ID."
  (format "*passepartout plan %s*" id))

(defun passepartout-plan--show-org (org)
  "Replace the current buffer's text with ORG, keeping point near.
The replacement is kept out of the undo list, which starts afresh: an
undo must never take the plan away and leave an empty buffer to approve."
  (let ((inhibit-read-only t)
        (pos (point)))
    (let ((buffer-undo-list t))
      (erase-buffer)
      (insert org))
    (setq passepartout-plan--shown org)
    (setq buffer-undo-list nil)
    (goto-char (min pos (point-max)))
    (set-buffer-modified-p nil)))

(defun passepartout-plan-buffer (id)
  "Return the buffer for plan ID, creating it from the stored plan."
  (let ((entry (or (gethash id passepartout-plan--plans)
                   (user-error "Unknown flight plan %s" id))))
    (or (let ((b (plist-get entry :buffer))) (and (buffer-live-p b) b))
        (let ((buffer (get-buffer-create (passepartout-plan--buffer-name id))))
          (with-current-buffer buffer
            (passepartout-plan--show-org (plist-get (plist-get entry :plan) :org))
            (passepartout-plan-mode)
            (setq passepartout-plan--id id)
            (goto-char (point-min))
            (unless (equal (plist-get entry :status) "pending")
              (setq buffer-read-only t)))
          (puthash id (plist-put entry :buffer buffer) passepartout-plan--plans)
          buffer))))

(defun passepartout-plan--set-status (id status)
  "Record STATUS for plan ID; its buffer is editable only while pending."
  (when-let ((entry (gethash id passepartout-plan--plans)))
    (puthash id (plist-put entry :status status) passepartout-plan--plans)
    (when-let ((buffer (plist-get entry :buffer)))
      (when (buffer-live-p buffer)
        (with-current-buffer buffer
          (setq buffer-read-only (not (equal status "pending")))
          (force-mode-line-update))))))

(defun passepartout-plan--append (buffer heading body)
  "Append an Org section HEADING with BODY to BUFFER, outside the undo list."
  (with-current-buffer buffer
    (let ((inhibit-read-only t)
          (buffer-undo-list t))
      (save-excursion
        (goto-char (point-max))
        (unless (bolp) (insert "\n"))
        (insert "\n* " heading "\n" body)
        (unless (bolp) (insert "\n"))))))

;;;; Deciding

(defconst passepartout-plan--action-regexp
  "^#\\+NAME: *action\n#\\+begin_src[^\n]*\n\\(\\(?:.*\n\\)*?\\)#\\+end_src"
  "The action block of a plan's Org text; group 1 is its body.")

(defun passepartout-plan--action (org)
  "Return the text of the action block (`#+NAME: action') in plan ORG, or nil."
  (when (and org
             (let ((case-fold-search t))
               (string-match passepartout-plan--action-regexp org)))
    (org-unescape-code-in-string (match-string 1 org))))

(defun passepartout-plan--outside-action (org)
  "Return ORG without the body of its action block, trimmed.
That is the part of a plan the daemon never reads back."
  (string-trim
   (if (let ((case-fold-search t))
         (string-match passepartout-plan--action-regexp org))
       (concat (substring org 0 (match-beginning 1)) (substring org (match-end 1)))
     org)))

(defun passepartout-plan--check-edits (id org)
  "Ask before approving plan ID with ORG when it was edited outside its action.
The daemon reads back only the action block: an edit to the heading or
the explanation changes nothing of what runs, and the person must not
believe it did.  ORG is compared with what the plan's buffer showed."
  (let* ((entry (gethash id passepartout-plan--plans))
         (buffer (plist-get entry :buffer))
         (offered (or (and (buffer-live-p buffer)
                           (buffer-local-value 'passepartout-plan--shown buffer))
                      (plist-get (plist-get entry :plan) :org))))
    (when (and org offered
               (not (equal (passepartout-plan--outside-action org)
                           (passepartout-plan--outside-action offered))))
      (unless (yes-or-no-p
               (concat "Only the src block under #+NAME: action is read back; your edits "
                       "elsewhere (the heading, the text) change nothing.  Approve the "
                       (if (equal (passepartout-plan--action org)
                                  (passepartout-plan--action offered))
                           "action as offered? "
                         "edited action block? ")))
        (user-error "Not approved: to change what runs, edit the src block under #+NAME: action")))))

(defun passepartout-plan--edited-title (entry)
  "Return the heading for ENTRY's action as the person edited it, or nil."
  (let* ((plan (plist-get entry :plan))
         (action (passepartout-plan--action
                  (or (plist-get entry :sent) (plist-get plan :org)))))
    (when (and action (not (string-empty-p (string-trim action))))
      (let ((lines (split-string (string-trim action) "\n")))
        (format "%s: %s%s (edited by you)"
                (or (plist-get plan :tool) "action")
                (car lines)
                (if (cdr lines) " …" ""))))))

(defun passepartout-plan--tell-chat (id status)
  "Show STATUS of plan ID in its tool call's section of the chat.
An edited action also replaces the model's in the section's heading.
A chat that is not open is told through its file."
  (when-let ((entry (gethash id passepartout-plan--plans)))
    (if-let ((chat (passepartout-chat-plan-buffer (plist-get entry :plan))))
      (with-current-buffer chat
        (let ((call (plist-get (plist-get entry :plan) :toolCallId)))
          (passepartout-chat--tool-plan-resolved call id status (plist-get entry :edited))
          (when-let ((title (and (plist-get entry :edited)
                                 (passepartout-plan--edited-title entry))))
            (passepartout-chat--tool-retitle call title))))
      (passepartout-chat-resolve-in-file (plist-get entry :session) id status))))

(defun passepartout-plan--current-id ()
  "Return the plan id of the current buffer, or signal."
  (or passepartout-plan--id (user-error "Not a flight plan buffer")))

(defun passepartout-plan--decide (id decision org comment)
  "Send DECISION (\"approve\" or \"reject\") for plan ID.
ORG is the buffer's text, COMMENT the person's reason, either may be nil."
  (let* ((entry (gethash id passepartout-plan--plans))
         (buffer (plist-get entry :buffer)))
    (unless (equal (plist-get entry :status) "pending")
      (user-error "Flight plan %s is already %s" id (plist-get entry :status)))
    (unless (passepartout--live-connection)
      (user-error "The daemon is not running: M-x passepartout starts it"))
    (when (equal decision "approve")
      (passepartout-plan--check-edits id org))
    (passepartout-plan--set-error id nil)
    (passepartout-plan--set-status id (if (equal decision "approve")
                                         "approving" "rejecting"))
    (passepartout--request-async
     :_passepartout/plan/decide
     `(:planId ,id :decision ,decision
               ,@(and org (list :org org))
               ,@(and comment (list :comment comment)))
     :timeout 30
     :success-fn
     (lambda (result)
       (let ((status (or (plist-get result :status) decision))
             (edited (eq (plist-get result :edited) t)))
         (when edited
           (puthash id (plist-put (plist-put (gethash id passepartout-plan--plans)
                                             :edited t)
                                  :sent org)
                    passepartout-plan--plans))
         ;; plan/resolved may have arrived first: then its text, which
         ;; holds the decision, has replaced the buffer; keep its word,
         ;; but the chat still learns that the action was edited.
         (unless (member (plist-get (gethash id passepartout-plan--plans) :status)
                         '("approving" "rejecting"))
           (when edited
             (passepartout-plan--tell-chat
              id (plist-get (gethash id passepartout-plan--plans) :status))))
         (when (member (plist-get (gethash id passepartout-plan--plans) :status)
                       '("approving" "rejecting"))
           (passepartout-plan--set-status id status)
           (passepartout-plan--tell-chat id status)
           (when (buffer-live-p buffer)
             (passepartout-plan--append
              buffer "Decision"
              (format "%s at %s%s%s\n" (capitalize status)
                      (format-time-string "%F %T")
                      (if edited " (edited)" "")
                      (if comment (format ": %s" comment) "")))))
         (passepartout-plans--reprint)
         (message "passepartout: flight plan %s %s%s" id status
                  (if edited " (edited)" ""))))
     :error-fn
     (lambda (error)
       (let ((msg (passepartout--error-message error)))
         ;; The plan may still be pending (an edit that cannot be read
         ;; back, or that a gate denies, can be fixed and sent again) or
         ;; decided elsewhere: ask the daemon rather than guess.
         (passepartout-plan--set-error id msg)
         (passepartout-plan--set-status id "pending")
         (passepartout-plan--refresh-status id)
         (message "passepartout: flight plan %s: %s" id msg)))
     :timeout-fn
     (lambda ()
       (passepartout-plan--set-status id "pending")
       (message "passepartout: no answer about flight plan %s; try again" id)))))

(defun passepartout-plan-approve ()
  "Approve this flight plan, with the buffer's text as the action to run."
  (interactive)
  (let ((id (passepartout-plan--current-id)))
    (passepartout-plan--decide
     id "approve"
     (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))
     nil)))

(defun passepartout-plan-reject (reason)
  "Reject this flight plan, telling the model REASON if it is not empty."
  (interactive (list (read-string "Reason for rejecting (optional): ")))
  (let ((id (passepartout-plan--current-id)))
    (passepartout-plan--decide
     id "reject" nil (and reason (not (string-empty-p reason)) reason))))

;;;; Notifications

(defun passepartout-plan--remember (plan)
  "Record PLAN (the daemon's plan object) and return its id."
  (let* ((id (plist-get plan :planId))
         (old (gethash id passepartout-plan--plans)))
    (puthash id (list :plan plan
                      :buffer (plist-get old :buffer)
                      :edited (plist-get old :edited)
                      :sent (plist-get old :sent)
                      :session (plist-get plan :sessionId)
                      :status (or (plist-get plan :status) "pending"))
             passepartout-plan--plans)
    id))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/plan/offer)) params)
  "Show the flight plan offered in PARAMS, or tell about it."
  (let* ((plan (plist-get params :plan))
         (id (passepartout-plan--remember plan))
         (session-buffer (passepartout-chat-plan-buffer plan)))
    (when (buffer-live-p session-buffer)
      (with-current-buffer session-buffer
        (passepartout-chat--tool-waiting (plist-get plan :toolCallId) id
                                         (plist-get plan :org))))
    ;; A buffer already open (a re-offer after a restart) keeps any edits.
    (let ((buffer (passepartout-plan-buffer id)))
      (with-current-buffer buffer (setq buffer-read-only nil))
      (pcase passepartout-plan-display
        ;; Shown, not selected: a C-c C-c typed for another buffer
        ;; must never approve a plan that just appeared.
        ('pop (display-buffer buffer))
        (_ (message "passepartout: flight plan %s awaits you: %s (%s)"
                    id (plist-get plan :title)
                    (if (buffer-live-p session-buffer)
                        (format "in %s, or M-x passepartout-plans" (buffer-name session-buffer))
                      "M-x passepartout-plans")))))
    (run-hook-with-args 'passepartout-plan-offered-hook id)))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/plan/resolved)) params)
  "Show the outcome of the flight plan in PARAMS and make its buffer read-only."
  (let* ((id (plist-get params :planId))
         (status (plist-get params :status))
         (org (plist-get params :org))
         (entry (gethash id passepartout-plan--plans)))
    (when entry
      (let ((plan (plist-get entry :plan)))
        (when org (setq plan (plist-put plan :org org)))
        (puthash id (plist-put (plist-put entry :plan plan) :status status)
                 passepartout-plan--plans))
      (let ((buffer (plist-get entry :buffer)))
        (when (buffer-live-p buffer)
          (with-current-buffer buffer
            (if (and org (not (string-empty-p org)))
                (passepartout-plan--show-org org)
              (passepartout-plan--append
               buffer "Result"
               (format "Status: %s\n%s" status
                       (if-let ((result (plist-get params :result)))
                           (concat "#+begin_example\n"
                                   (org-escape-code-in-string
                                    (string-trim-right result "\n+"))
                                   "\n#+end_example\n")
                         ""))))
            (setq buffer-read-only t)
            (force-mode-line-update))))
      (passepartout-plan--tell-chat id status))
    (passepartout-plans--reprint)
    (message "passepartout: flight plan %s %s" id status)
    (run-hook-with-args 'passepartout-plan-resolved-hook id)))

;;;; Listing

(defvar passepartout-plans-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'passepartout-plans-open)
    map)
  "Keymap for `passepartout-plans-mode'.")

(define-derived-mode passepartout-plans-mode tabulated-list-mode "Flight-plans"
  "Major mode listing pending passepartout flight plans.
\\<passepartout-plans-mode-map>\\[passepartout-plans-open] opens the plan at point.

\\{passepartout-plans-mode-map}"
  (setq tabulated-list-format
        [("Plan" 16 t) ("Created" 20 t) ("Tool" 10 t) ("Title" 0 nil)])
  (setq tabulated-list-sort-key '("Created" . nil))
  (add-hook 'tabulated-list-revert-hook #'passepartout-plans--refresh nil t)
  (tabulated-list-init-header))

(defun passepartout-plans--sync ()
  "Refresh the table of plans from the daemon, if it is running."
  (when-let ((conn (passepartout--live-connection)))
    (let ((result (jsonrpc-request conn :_passepartout/plans/list nil :timeout 10)))
      (cl-loop for plan across (plist-get result :plans)
               do (passepartout-plan--remember plan)))))

(defun passepartout-plans--refresh ()
  "Fill the table with the pending plans, as the daemon knows them."
  (passepartout-plans--sync)
  (passepartout-plans--fill))

(defun passepartout-plans--fill ()
  "Fill the table with the plans Emacs knows to be pending."
  (setq tabulated-list-entries
        (let (rows)
          (maphash
           (lambda (id entry)
             (when (equal (plist-get entry :status) "pending")
               (let ((plan (plist-get entry :plan)))
                 (push (list id (vector id
                                        (or (plist-get plan :createdAt) "")
                                        (or (plist-get plan :tool) "")
                                        (or (plist-get plan :title) "")))
                       rows))))
           passepartout-plan--plans)
          rows)))

(defun passepartout-plans--reprint ()
  "Show the table of plans again from what Emacs knows, without asking.
Called after each decision; it must not wait for the daemon, since it
runs from the connection's process filter."
  (when-let ((buffer (get-buffer "*passepartout plans*")))
    (with-current-buffer buffer
      (when (derived-mode-p 'passepartout-plans-mode)
        (passepartout-plans--fill)
        (tabulated-list-print t)))))

(defun passepartout-plans-open ()
  "Open the flight plan on this line."
  (interactive)
  (let ((id (or (tabulated-list-get-id) (user-error "No plan on this line"))))
    (pop-to-buffer (passepartout-plan-buffer id))))

(defun passepartout-plans-list ()
  "Show the list of pending flight plans."
  (let ((buffer (get-buffer-create "*passepartout plans*")))
    (with-current-buffer buffer
      (passepartout-plans-mode)
      (passepartout-plans--refresh)
      (tabulated-list-print))
    buffer))

(provide 'passepartout-plan)
;;; passepartout-plan.el ends here
