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
;; C-c RET); the answer streams under a "* passepartout" heading, above
;; the next "* You": the person writes the next prompt while it streams,
;; and the transcript above the prompt is read-only.
;; Reasoning and tool calls become level-2 sections whose TODO keyword is
;; the call's status (PENDING, RUNNING, WAITING, DONE, FAILED, or a flight
;; plan's outcome: REJECTED, DENIED, INTERRUPTED); they fold when they
;; are complete.
;;
;; Streaming costs in proportion to each chunk: text is inserted at a
;; marker, tool sections are found through markers kept in a hash table
;; keyed by toolCallId, and nothing ever scans or re-renders the buffer.
;;
;; Every chat is also an Org file under `passepartout-chat-directory',
;; written as the answer streams (at most every
;; `passepartout-chat-save-interval' seconds, and at each turn's end).
;; Its top property drawer holds the session id, the project directory
;; and the provider: `passepartout-chats' lists the files, and opening
;; one asks the daemon to resume the session (`session/load'); if it
;; cannot, a new session starts and the chat says so.
;;
;; A flight plan waiting for a tool call is shown in the tool's section
;; with its gate trace; there C-c C-c approves, C-c C-k rejects and
;; C-c C-o opens the full plan buffer for editing.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'org)
(require 'org-element)
(require 'passepartout-rpc)

(defcustom passepartout-chat-directory
  (let ((xdg (getenv "XDG_DATA_HOME")))
    (if (and xdg (file-name-absolute-p xdg))
        (expand-file-name "passepartout/chats/" xdg)
      (locate-user-emacs-file "passepartout/chats/")))
  "Directory where each chat is saved as an Org file, or nil not to save.
The default is $XDG_DATA_HOME/passepartout/chats/ when XDG_DATA_HOME is
set, else passepartout/chats/ in `user-emacs-directory'."
  :type '(choice (const :tag "Do not save chats" nil) directory)
  :group 'passepartout)

(defcustom passepartout-chat-save-interval 2
  "Seconds between saves of a chat file while an answer streams.
The file is also written when each turn ends."
  :type 'number
  :group 'passepartout)

(defcustom passepartout-chat-stream-gc-threshold 67108864
  "`gc-cons-threshold' while an answer streams into a chat, or nil.
A garbage collection stops Emacs for tens of milliseconds, and parsing
and inserting a streamed answer allocates enough for one or two per
megabyte: each one a keystroke that waits.  While any chat streams, the
threshold is raised to this many bytes (never lowered); when the last
one ends the person's own value is put back, and Emacs collects once as
soon as it is idle.  nil leaves `gc-cons-threshold' alone."
  :type '(choice (const :tag "Leave gc-cons-threshold alone" nil) integer)
  :group 'passepartout)

(defvar passepartout-chat--gc-holders nil
  "Chat buffers streaming while `gc-cons-threshold' is raised for them.")

(defvar passepartout-chat--gc-saved nil
  "The person's `gc-cons-threshold', while it is raised; else nil.")

(defvar passepartout-chat--gc-restore-timer nil
  "The idle timer that puts `gc-cons-threshold' back, once set.")

(defun passepartout-chat--hold-gc ()
  "Raise `gc-cons-threshold' while this chat's answer streams."
  (when passepartout-chat-stream-gc-threshold
    (when passepartout-chat--gc-restore-timer
      (cancel-timer passepartout-chat--gc-restore-timer)
      (setq passepartout-chat--gc-restore-timer nil))
    (unless passepartout-chat--gc-saved
      (setq passepartout-chat--gc-saved gc-cons-threshold
            gc-cons-threshold (max gc-cons-threshold
                                   passepartout-chat-stream-gc-threshold)))
    (cl-pushnew (current-buffer) passepartout-chat--gc-holders)
    (add-hook 'kill-buffer-hook #'passepartout-chat--release-gc nil t)))

(defun passepartout-chat--release-gc ()
  "Let go of this chat's hold; after the last one, restore when idle.
Dead buffers let go too, so a chat killed while streaming cannot keep
the threshold raised.  The threshold is put back only once Emacs is
idle: put back at once, the turn's garbage would be collected right
away, while the person may be typing."
  (setq passepartout-chat--gc-holders
        (cl-remove-if (lambda (b) (or (eq b (current-buffer)) (not (buffer-live-p b))))
                      passepartout-chat--gc-holders))
  (when (and (null passepartout-chat--gc-holders)
             passepartout-chat--gc-saved
             (not passepartout-chat--gc-restore-timer))
    (setq passepartout-chat--gc-restore-timer
          (run-with-idle-timer 0.5 nil #'passepartout-chat--restore-gc))))

(defun passepartout-chat--restore-gc ()
  "Put the person's `gc-cons-threshold' back and collect the turn's garbage."
  (setq passepartout-chat--gc-restore-timer nil)
  (when (and (null passepartout-chat--gc-holders) passepartout-chat--gc-saved)
    (setq gc-cons-threshold passepartout-chat--gc-saved
          passepartout-chat--gc-saved nil)
    (garbage-collect)))

(defvar passepartout-plan--plans)
(declare-function passepartout-plan--decide "passepartout-plan"
                  (id decision org comment))
(declare-function passepartout-plan-buffer "passepartout-plan" (id))
(declare-function passepartout-plans--sync "passepartout-plan" ())
(declare-function passepartout-plans "passepartout")
(declare-function passepartout-events "passepartout")
(declare-function passepartout-restart "passepartout")
(declare-function passepartout-stderr "passepartout")
(declare-function passepartout-log "passepartout")
(declare-function passepartout-chats "passepartout")
(declare-function passepartout-menu "passepartout-menu")

(defvar passepartout-chat-session-hook nil
  "Hook run in a chat buffer once it has a new or resumed session.")

(defvar passepartout-chat--buffers (make-hash-table :test #'equal)
  "Chat buffers by project root.")

(defvar passepartout-chat--sessions (make-hash-table :test #'equal)
  "Chat buffers by session id.")

(defvar passepartout-chat--plan-chats (make-hash-table :test #'equal)
  "Chat buffers by the id of the flight plan waiting in them.
A chat resumed after a restart may have a new session: its plans are
found through this table, not through the session.")

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

(defvar-local passepartout-chat--element-cache nil
  "While a turn streams: (VALUE LOCAL) of `org-element-use-cache' before it.
LOCAL is non-nil when the value was buffer-local.  nil when the cache
is not suspended.  See
`passepartout-chat--suspend-element-cache'.")

(defvar-local passepartout-chat--pending nil
  "Answer text received but not yet shown, newest first: (KIND . TEXT).
KIND is `message' or `thought'.  The process filter only queues text;
a timer shows it (see `passepartout-chat--drain').")

(defvar-local passepartout-chat--drain-timer nil
  "Timer that shows the queued answer text, or nil.")

(defvar-local passepartout-chat--held ""
  "Stars at a line start held back until the next chunk shows what follows.")

(defvar-local passepartout-chat--tools nil
  "Tool call sections by toolCallId: a plist of markers and state.")

(defvar-local passepartout-chat--plan nil
  "Markers (START . END) around this turn's plan section, or nil.")

(defvar-local passepartout-chat--status nil
  "The last `_passepartout/session/status' params for this session.")

(defvar-local passepartout-chat--usage nil
  "The last `_passepartout/usage' params for this session.")

(defvar-local passepartout-chat--turn-start nil
  "Marker at the heading of the running or last turn.")

(defvar-local passepartout-chat--file nil
  "The Org file this chat is saved to.")

(defvar-local passepartout-chat--resume nil
  "A session id saved in the chat file, to resume on the next start.")

(defvar-local passepartout-chat--saved nil
  "What the chat file holds, for saving only what changed: nil, or
\(MARKER . BYTES) when the buffer's text before MARKER is, byte for byte,
the start of the file, whose size is BYTES.")

(defvar-local passepartout-chat--save-timer nil
  "Timer that saves the chat file while an answer streams, or nil.")

(defvar-local passepartout-chat--compacting nil
  "Markers (START . END) of the \"Compacting…\" line of the running turn, or nil.")

(defvar-local passepartout-chat--modes nil
  "The session's modes as the daemon advertised them (`SessionModeState').")

(defvar-local passepartout-chat--commands nil
  "The slash commands the daemon announced for this session (a list).")

(defconst passepartout-chat--protected
  '(read-only t front-sticky (read-only) rear-nonsticky (read-only))
  "Text properties of the transcript: nothing typed lands inside it.
Front-sticky, so typing just before protected text (where the answer
streams) is refused too; rear-nonsticky, so the prompt after the last
\"* You\" line stays writable.")

(defconst passepartout-chat--keywords
  '((sequence "PENDING" "RUNNING" "WAITING" "|"
              "DONE" "FAILED" "REJECTED" "DENIED" "INTERRUPTED" "DECIDED"))
  "Org TODO keywords showing tool call status.")

(defconst passepartout-chat--plan-keywords
  '(("executed" . "DONE") ("failed" . "FAILED") ("rejected" . "REJECTED")
    ("denied" . "DENIED") ("interrupted" . "INTERRUPTED")
    ("decided elsewhere" . "DECIDED"))
  "Flight plan outcome (docs/plans.md) to Org keyword.
A call that waited for a plan ends with the plan's outcome, which ACP's
tool call status can only call \"failed\".  A plan this Emacs saw
waiting and the daemon no longer lists was decided where this Emacs
could not hear of it (another Emacs, the command line, while Emacs was
not running): its outcome is asked of the daemon, and is \"decided
elsewhere\" only when the daemon cannot say.")

(defconst passepartout-chat--tool-keywords
  '(("pending" . "PENDING") ("in_progress" . "RUNNING")
    ("completed" . "DONE") ("failed" . "FAILED"))
  "ACP tool call status to Org keyword.")

;;;; Mode

(defvar passepartout-chat-mode-map
  (let ((map (make-sparse-keymap)))
    ;; C-c RET and C-c C-m are one key: it sends.
    (define-key map (kbd "C-c RET") #'passepartout-chat-send)
    (define-key map (kbd "C-c C-k") #'passepartout-chat-cancel)
    (define-key map (kbd "C-c C-p") #'passepartout-plans)
    (define-key map (kbd "C-c C-s") #'passepartout-menu)
    ;; A chat is saved to its own file, never "into" the project.
    (define-key map [remap save-buffer] #'passepartout-chat-save)
    map)
  "Keymap for `passepartout-chat-mode'.
\\[org-ctrl-c-ctrl-c] sends too, when point is in the prompt (through
`org-ctrl-c-ctrl-c-hook', so Org keeps it elsewhere).")

(defvar passepartout-chat-plan-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'passepartout-chat-approve-plan)
    (define-key map (kbd "C-c C-k") #'passepartout-chat-reject-plan)
    (define-key map (kbd "C-c C-o") #'passepartout-chat-open-plan)
    map)
  "Keys on a flight plan waiting in a chat buffer.")

(easy-menu-define passepartout-chat-menu passepartout-chat-mode-map
  "Menu for passepartout chat buffers."
  '("Passepartout"
    ["Send prompt" passepartout-chat-send :active (null passepartout-chat--stream)]
    ["Cancel turn" passepartout-chat-cancel :active passepartout-chat--stream]
    "---"
    ["Provider and model..." passepartout-menu]
    ["Session mode..." passepartout-set-mode]
    ["Flight plans waiting" passepartout-plans]
    ["Saved chats" passepartout-chats]
    "---"
    ["Events (JSON-RPC log)" passepartout-events]
    ["Daemon's warnings (stderr)" passepartout-stderr]
    ["Daemon's log file" passepartout-log]
    ["Restart the daemon" passepartout-restart]))

(define-derived-mode passepartout-chat-mode org-mode "passepartout"
  "Major mode for chatting with passepartout in Org.
Write under the last \"* You\" heading; \\[passepartout-chat-send] or
\\[org-ctrl-c-ctrl-c] sends, \\[passepartout-chat-cancel] cancels the running turn.
The answer streams above a new \"* You\" heading, where you can write
the next prompt meanwhile; the transcript above it is read-only.
\\[passepartout-chat-save] writes the chat to its file.

When an action needs your approval, its flight plan waits in the tool
call's section: there \\<passepartout-chat-plan-map>\\[passepartout-chat-approve-plan] approves, \\[passepartout-chat-reject-plan] rejects and \\[passepartout-chat-open-plan] opens
the plan buffer to edit the action first.

Other commands (also in the Passepartout menu):
\\<passepartout-chat-mode-map>
- \\[passepartout-plans] `passepartout-plans': the flight plans waiting for you.
- \\[passepartout-menu] `passepartout-menu': provider, model and settings for this session.
- \\[passepartout-set-mode] `passepartout-set-mode': the session mode (read-only, ask, auto).
- Typing `/' at the start of the prompt completes the slash commands of
  the skills (\\[completion-at-point]).
- `passepartout-chats': saved chats; opening one resumes it.
- `passepartout-events': the JSON-RPC messages (off by default, see
  `passepartout-events-buffer-size').
- `passepartout-stderr': the daemon's warnings;
  `passepartout-log': its log file.
- `passepartout-restart': stop the daemon and start it again.

The chat is saved to an Org file in `passepartout-chat-directory'.

\\{passepartout-chat-mode-map}"
  (setq-local org-todo-keywords passepartout-chat--keywords)
  (org-set-regexps-and-options)
  (setq-local passepartout-chat--tools (make-hash-table :test #'equal))
  (setq-local mode-line-process '(:eval (passepartout-chat--mode-line)))
  (add-hook 'completion-at-point-functions #'passepartout-chat--command-capf nil t)
  ;; Code the model writes is shown, never run by a stray C-c C-c.
  (setq-local org-confirm-babel-evaluate t)
  (add-hook 'org-ctrl-c-ctrl-c-hook #'passepartout-chat--ctrl-c-ctrl-c nil t)
  (add-hook 'before-change-functions #'passepartout-chat--unsaved-from nil t)
  (add-to-invisibility-spec '(passepartout-long-line . t))
  ;; As `so-long' does: a long line of left-to-right text needs no
  ;; bidirectional reordering, which costs redisplay its length.
  (setq bidi-paragraph-direction 'left-to-right)
  (setq-local bidi-inhibit-bpa t)
  (add-hook 'kill-buffer-hook #'passepartout-chat--forget nil t))

(defun passepartout-chat--ctrl-c-ctrl-c ()
  "Send the prompt if point is in it; otherwise leave the key to Org.
Run from `org-ctrl-c-ctrl-c-hook'."
  (when (and passepartout-chat--prompt
             (>= (point) passepartout-chat--prompt))
    (passepartout-chat-send)
    t))

(defun passepartout-chat--forget ()
  "Forget this buffer's session; cancel its turn; save its file."
  (when passepartout-chat--drain-timer
    (cancel-timer passepartout-chat--drain-timer))
  (when passepartout-chat--stream
    (ignore-errors (passepartout-chat-cancel)))
  (when (buffer-modified-p) (passepartout-chat-save))
  (when passepartout-chat--session-id
    (remhash passepartout-chat--session-id passepartout-chat--sessions))
  (when (eq (gethash passepartout-chat--root passepartout-chat--buffers)
            (current-buffer))
    (remhash passepartout-chat--root passepartout-chat--buffers))
  (unless (cl-some (lambda (b) (and (not (eq b (current-buffer)))
                                    (eq (buffer-local-value 'major-mode b)
                                        'passepartout-chat-mode)))
                   (buffer-list))
    (remove-hook 'kill-emacs-hook #'passepartout-chat--save-all)))

(defun passepartout-chat--mode-line ()
  "Return the mode-line text: session state and mode, provider and tokens."
  (let* ((status passepartout-chat--status)
         (state (cond ((not (passepartout--live-connection)) "stopped")
                      (status (plist-get status :state))
                      (passepartout-chat--stream "sent")
                      (t "idle")))
         (provider (plist-get status :provider))
         (in (plist-get status :inputTokens))
         (out (plist-get status :outputTokens)))
    (concat " [" state
            (if-let ((mode (plist-get passepartout-chat--modes :currentModeId)))
                (concat " " mode)
              "")
            (if (and provider (not (string-empty-p provider)))
                (concat " " (car (split-string provider " (")))
              "")
            (if (and (or in out) (not passepartout-chat--usage))
                (format " %s↑%s↓" (or in 0) (or out 0))
              "")
            (passepartout-chat--usage-text passepartout-chat--usage)
            "]")))

(defun passepartout-chat--tokens (n)
  "Return token count N compactly: 950, 12.3k, 1.2M."
  (cond ((not (numberp n)) "0")
        ((< n 1000) (format "%d" n))
        ((< n 1000000) (format "%.1fk" (/ n 1000.0)))
        (t (format "%.1fM" (/ n 1000000.0)))))

(defun passepartout-chat--usage-text (usage)
  "Return the mode-line text of USAGE, `_passepartout/usage' params, or \"\"."
  (if (not usage)
      ""
    (let* ((session (plist-get usage :session))
           (day (plist-get usage :day))
           (currency (or (plist-get usage :currency) "USD"))
           (sign (if (equal currency "USD") "$" (concat currency " ")))
           (cost (lambda (u)
                   (let ((c (plist-get u :cost)))
                     ;; A local model costs nothing: no "$0.000" noise.
                     (if (and (numberp c) (> c 0)) (format "%s%.3f" sign c) "")))))
      (concat " "
              (passepartout-chat--tokens (plist-get session :inputTokens)) "↑"
              (passepartout-chat--tokens (plist-get session :outputTokens)) "↓"
              (let ((c (funcall cost session)))
                (if (string-empty-p c) "" (concat " " c)))
              (let ((c (funcall cost day)))
                (if (string-empty-p c) "" (concat " (day " c ")")))))))

;;;; Chat files

(defconst passepartout-chat--header-bytes 4096
  "Bytes read from the top of a chat file to list it.")

(defun passepartout-chat--new-file (root)
  "Return a fresh chat file name for project ROOT."
  (let* ((dir (file-name-as-directory (expand-file-name passepartout-chat-directory)))
         (stem (concat (format-time-string "%Y-%m-%d-%H%M%S-")
                       (replace-regexp-in-string
                        "[^[:alnum:]._-]+" "_"
                        (file-name-nondirectory (directory-file-name root)))))
         (file (expand-file-name (concat stem ".org") dir))
         (n 1))
    (while (file-exists-p file)
      (setq file (expand-file-name (format "%s-%d.org" stem (cl-incf n)) dir)))
    file))

(defun passepartout-chat--properties-end ()
  "Return the position of the \":END:\" line of the file's top drawer, or nil."
  (save-excursion
    (goto-char (point-min))
    (when (looking-at-p ":PROPERTIES:$")
      (re-search-forward "^:END:$" (+ (point) passepartout-chat--header-bytes) t)
      (match-beginning 0))))

(defun passepartout-chat--set-property (key value)
  "Set file property KEY (e.g. \"PASSEPARTOUT_SESSION\") to VALUE in the top drawer."
  (when-let ((end (passepartout-chat--properties-end)))
    (let ((inhibit-read-only t)
          (line (format ":%s: %s" key (replace-regexp-in-string "[\n\r]" " " value))))
      (save-excursion
        (goto-char (point-min))
        (if (re-search-forward (format "^:%s:.*$" (regexp-quote key)) end t)
            (replace-match line t t)
          (goto-char end)
          (insert line "\n"))
        (passepartout-chat--protect (line-beginning-position 0) (point))))))

(defun passepartout-chat--get-property (key)
  "Return the value of file property KEY in the top drawer, or nil."
  (when-let ((end (passepartout-chat--properties-end)))
    (save-excursion
      (goto-char (point-min))
      (when (re-search-forward (format "^:%s: *\\(.*\\)$" (regexp-quote key)) end t)
        (let ((v (string-trim (match-string-no-properties 1))))
          (and (not (string-empty-p v)) v))))))

(defun passepartout-chat--unsaved-from (pos &rest _)
  "Note that the text from POS on differs from the chat file.
In `before-change-functions', and called for streamed text (which runs
no change hook)."
  (when-let ((saved passepartout-chat--saved))
    (when (< pos (car saved))
      (set-marker (car saved) pos))))

;; A chat grows at its end: a save writes only the text after the first
;; change since the last one, at its place in the file (writing a long
;; chat whole, at every save, stalled Emacs in proportion to its size).
;; While an answer streams and when a turn ends, it is written in pieces
;; of `passepartout-chat--save-piece' characters, one per timer run, so
;; that a keystroke never waits for more than one piece.

(defconst passepartout-chat--save-piece 65536
  "Characters written to a chat file per timer run when saving in the background.")

(defun passepartout-chat--bytes (pos)
  "Bytes the chat's text before POS takes in its UTF-8 file.
True while the file's encoding of the text is the buffer's own (no raw
bytes in it); every save that reaches the end checks it."
  (1- (position-bytes pos)))

(defun passepartout-chat--write (&optional piece)
  "Write what changed since the last save to the chat file.
With PIECE, write at most PIECE characters of it.  Return non-nil when
the file holds the whole buffer."
  (save-restriction
    (widen)
    (let* ((file passepartout-chat--file)
           (saved passepartout-chat--saved)
           (coding-system-for-write 'utf-8-unix)
           (write-region-inhibit-fsync t)
           (to (point-max)))
      (if (and saved (eql (file-attribute-size (file-attributes file)) (cdr saved)))
          (let ((from (car saved)))
            (when piece (setq to (min to (+ from piece))))
            (write-region from to file (passepartout-chat--bytes from) 'silent))
        (let ((dir (file-name-directory file)))
          (unless (file-directory-p dir) (make-directory dir t)))
        (write-region nil nil file nil 'silent))
      (let ((size (file-attribute-size (file-attributes file)))
            (whole (= to (point-max))))
        (when (and whole (not (eql size (passepartout-chat--bytes to))))
          ;; Longer: the text shrank, and writing at an offset never
          ;; shortens a file.  Other: the encoding is not the buffer's.
          (write-region nil nil file nil 'silent)
          (setq size (file-attribute-size (file-attributes file))))
        (setq passepartout-chat--saved
              (and (>= size (passepartout-chat--bytes to))
                   (or (not whole) (eql size (passepartout-chat--bytes to)))
                   (cons (if saved (set-marker (car saved) to) (copy-marker to))
                         size)))
        whole))))

(defun passepartout-chat--save-error (err)
  "Say that the chat could not be saved, because of ERR."
  (message "passepartout: cannot save the chat to %s: %s"
           passepartout-chat--file (error-message-string err)))

(defun passepartout-chat-save ()
  "Write this chat to its Org file now."
  (interactive)
  (when passepartout-chat--save-timer
    (cancel-timer passepartout-chat--save-timer)
    (setq passepartout-chat--save-timer nil))
  (when passepartout-chat--file
    (condition-case err
        (when (passepartout-chat--write)
          (set-buffer-modified-p nil))
      (error (passepartout-chat--save-error err)))))

(defun passepartout-chat--save-piece (buffer)
  "Write the next piece of BUFFER's chat; go on later until it is whole.
A piece waits while input is pending."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq passepartout-chat--save-timer nil)
      (when passepartout-chat--file
        (condition-case err
            (if (and (not (input-pending-p))
                     (passepartout-chat--write passepartout-chat--save-piece))
                (set-buffer-modified-p nil)
              (passepartout-chat--save-later 0.02))
          (error (passepartout-chat--save-error err)))))))

(defun passepartout-chat--save-later (delay)
  "Save the chat in the background in DELAY seconds, unless one is due."
  (when (and passepartout-chat--file (not passepartout-chat--save-timer))
    (setq passepartout-chat--save-timer
          (run-at-time delay nil #'passepartout-chat--save-piece
                       (current-buffer)))))

(defun passepartout-chat--save-soon ()
  "Save the chat within `passepartout-chat-save-interval' seconds."
  (passepartout-chat--save-later passepartout-chat-save-interval))

;;;; Buffers and sessions

(defun passepartout-chat--buffer-name (root)
  "Name of the chat buffer for ROOT."
  (format "*passepartout %s*"
          (file-name-nondirectory (directory-file-name root))))

(defun passepartout-chat--make-buffer (root)
  "Return a new, empty chat buffer for ROOT, registered as ROOT's chat."
  (let ((buffer (generate-new-buffer (passepartout-chat--buffer-name root))))
    (with-current-buffer buffer
      (passepartout-chat-mode)
      (setq passepartout-chat--root root)
      (setq default-directory root))
    (puthash root buffer passepartout-chat--buffers)
    ;; Installed with the first chat and removed with the last (see
    ;; `passepartout-chat--forget'): loading the package changes nothing.
    (add-hook 'kill-emacs-hook #'passepartout-chat--save-all)
    buffer))

(defun passepartout-chat-live-buffer (root)
  "Return the live chat buffer of project ROOT, or nil."
  (let ((b (gethash (file-name-as-directory (expand-file-name root))
                    passepartout-chat--buffers)))
    (and (buffer-live-p b) b)))

(defun passepartout-chat-buffer (root)
  "Return the chat buffer for project ROOT, creating it if needed.
A new chat gets a new file in `passepartout-chat-directory'."
  (let ((root (file-name-as-directory (expand-file-name root))))
    (or (let ((b (gethash root passepartout-chat--buffers)))
          (and (buffer-live-p b) b))
        (let ((buffer (passepartout-chat--make-buffer root)))
          (with-current-buffer buffer
            (let ((inhibit-read-only t))
              (insert ":PROPERTIES:\n"
                      ":PASSEPARTOUT_CWD: " root "\n"
                      ":END:\n"
                      (format "#+title: passepartout: %s\n" (abbreviate-file-name root))
                      "# Write under the last \"* You\" heading. "
                      "C-c C-c sends, C-c C-k cancels.\n"))
            (passepartout-chat--new-prompt)
            (when passepartout-chat-directory
              (setq passepartout-chat--file (passepartout-chat--new-file root))))
          buffer))))

(defun passepartout-chat-open-file (file)
  "Open the saved chat FILE in a chat buffer and return the buffer.
Its session is resumed when the daemon can (see
`passepartout-chat--ensure-session')."
  (let* ((file (expand-file-name file))
         (open (passepartout-chat--file-buffer file)))
    (or open
        (let* ((root (with-temp-buffer
                       (insert-file-contents file nil 0 passepartout-chat--header-bytes)
                       (passepartout-chat--get-property "PASSEPARTOUT_CWD")))
               (root (file-name-as-directory
                      (expand-file-name (or root (file-name-directory file)))))
               (previous (passepartout-chat-live-buffer root))
               (buffer (passepartout-chat--make-buffer root)))
          (when previous (passepartout-chat--drop-unused previous))
          (with-current-buffer buffer
            (let ((inhibit-read-only t))
              (insert-file-contents file))
            (setq passepartout-chat--file file
                  passepartout-chat--resume
                  (passepartout-chat--get-property "PASSEPARTOUT_SESSION"))
            ;; Reuse the last "* You" if nothing follows it but a prompt.
            (goto-char (point-max))
            (if (and (re-search-backward "^\\* " nil t)
                     (looking-at-p "^\\* You$"))
                (progn
                  (setq passepartout-chat--prompt-heading (copy-marker (point) t))
                  (forward-line 1)
                  (setq passepartout-chat--prompt (copy-marker (point))))
              (passepartout-chat--new-prompt))
            (passepartout-chat--protect (point-min) passepartout-chat--prompt)
            (passepartout-chat--revive-plans)
            (goto-char (point-max))
            (set-buffer-modified-p nil))
          buffer))))

(defun passepartout-chat--file-buffer (file)
  "Return the live chat buffer of FILE, or nil: a chat is never opened twice."
  (cl-find-if (lambda (b)
                (and (eq (buffer-local-value 'major-mode b) 'passepartout-chat-mode)
                     (equal (buffer-local-value 'passepartout-chat--file b) file)))
              (buffer-list)))

(defun passepartout-chat--unused-p ()
  "Non-nil when this chat has had no turn and its prompt is empty."
  (and (not passepartout-chat--stream)
       (string-empty-p (string-trim (buffer-substring-no-properties
                                     passepartout-chat--prompt (point-max))))
       (save-excursion
         (goto-char (point-min))
         (not (re-search-forward "^\\* passepartout$" nil t)))))

(defun passepartout-chat--drop-unused (buffer)
  "Kill chat BUFFER if nothing was ever said in it.
Opening a saved chat of a project then leaves one chat buffer, not an
empty one beside it; the empty chat's file goes with it."
  (with-current-buffer buffer
    (when (passepartout-chat--unused-p)
      (let ((file passepartout-chat--file))
        (set-buffer-modified-p nil)
        (setq passepartout-chat--file nil)
        (kill-buffer buffer)
        (when (and file (file-exists-p file)) (delete-file file))))))

(defun passepartout-chat-last-file (root)
  "Return the most recently written chat file of project ROOT, or nil."
  (let ((dir passepartout-chat-directory)
        (root (file-name-as-directory (expand-file-name root))))
    (when (and dir (file-directory-p dir))
      (cl-loop for (file . attrs)
               in (sort (directory-files-and-attributes dir t "\\`[^.#].*\\.org\\'" t)
                        (lambda (a b)
                          (time-less-p (file-attribute-modification-time (cdr b))
                                       (file-attribute-modification-time (cdr a)))))
               when (and (not (file-attribute-type attrs))
                         (with-temp-buffer
                           (insert-file-contents file nil 0 passepartout-chat--header-bytes)
                           (equal (ignore-errors
                                    (file-name-as-directory
                                     (expand-file-name
                                      (passepartout-chat--get-property "PASSEPARTOUT_CWD"))))
                                  root)))
               return file))))

(defun passepartout-chat--load-session (conn id)
  "Ask CONN to resume session ID; return nil on success, else the reason.
Updates the daemon replays before answering are ignored: the buffer
already shows the transcript (no turn is streaming, so they have no place)."
  (condition-case err
      (progn
        (setq passepartout-chat--modes
              (plist-get (jsonrpc-request conn :session/load
                                          (list :sessionId id
                                                :cwd (directory-file-name passepartout-chat--root)
                                                :mcpServers [])
                                          :timeout 30)
                         :modes))
        nil)
    (jsonrpc-error (passepartout--error-message err))))

(defun passepartout-chat--ensure-session ()
  "Give the current chat buffer a session on a live daemon; return its id.
A buffer that had a session (before the daemon restarted, or saved in
its file) first asks the daemon to resume it with `session/load'; when
the daemon cannot, a new session starts and the chat says so."
  (let ((conn (passepartout--ensure-connection)))
    (unless (and passepartout-chat--session-id
                 (eq passepartout-chat--connection conn))
      (let* ((old (or passepartout-chat--session-id passepartout-chat--resume))
             (refused (and old (passepartout-chat--load-session conn old)))
             (id (if (and old (not refused))
                     old
                   ;; The daemon starts the configured MCP servers
                   ;; first, each within its own startup timeout (10 s
                   ;; by default): jsonrpc's default 10 s is too short.
                   (let ((new (jsonrpc-request conn :session/new
                                               (list :cwd (directory-file-name
                                                           passepartout-chat--root)
                                                     :mcpServers [])
                                               :timeout 60)))
                     (setq passepartout-chat--modes (plist-get new :modes))
                     (plist-get new :sessionId)))))
        (when (and passepartout-chat--session-id
                   (not (equal id passepartout-chat--session-id)))
          (remhash passepartout-chat--session-id passepartout-chat--sessions))
        (cond ((not old))
              (refused
               (passepartout-chat--note
                (format "Could not resume session %s (%s): this is a new session, %s. The model does not remember the conversation above."
                        old refused id)))
              (t (passepartout-chat--note (format "Resumed session %s." id))))
        (setq passepartout-chat--session-id id
              passepartout-chat--resume nil
              passepartout-chat--connection conn
              passepartout-chat--status nil)
        (puthash id (current-buffer) passepartout-chat--sessions)
        (passepartout-chat--set-property "PASSEPARTOUT_SESSION" id)
        (run-hooks 'passepartout-chat-session-hook)
        (passepartout-chat-save)
        (passepartout-chat--announce-pending conn)
        (passepartout-chat--reconcile-plans conn)))
    passepartout-chat--session-id))

(defun passepartout-chat--waiting-plans ()
  "Return the ids of the plans this chat shows waiting."
  (let (ids)
    (maphash (lambda (_id tool)
               (when (and (plist-get tool :plan-id) (plist-get tool :overlay))
                 (push (plist-get tool :plan-id) ids)))
             passepartout-chat--tools)
    ids))

(defun passepartout-chat--reconcile-plans (conn)
  "Mark the plans this chat shows waiting that CONN's daemon no longer lists.
The daemon offers every pending plan after `initialize', so a plan it
does not list was decided while this chat could not hear of it."
  (when-let ((shown (passepartout-chat--waiting-plans)))
    (let* ((result (ignore-errors
                     (jsonrpc-request conn :_passepartout/plans/list nil :timeout 10)))
           (pending (and result
                         (mapcar (lambda (p) (plist-get p :planId))
                                 (plist-get result :plans)))))
      (when result
        (dolist (id shown)
          (unless (member id pending)
            (passepartout-chat--tool-plan-resolved
             nil id (passepartout-chat--plan-outcome conn id))))))))

(defun passepartout-chat--plan-outcome (conn id)
  "Return how plan ID ended, as CONN's daemon recorded it.
\"decided elsewhere\" when the daemon cannot say (an older daemon, a
plan it no longer keeps): the chat must stop saying WAITING either way."
  (let* ((result (ignore-errors
                   (jsonrpc-request conn :_passepartout/plans/get
                                    (list :planId id) :timeout 10)))
         (status (plist-get (plist-get result :plan) :status)))
    (if (assoc status passepartout-chat--plan-keywords)
        status
      "decided elsewhere")))

(defun passepartout-chat--announce-pending (conn)
  "Say once per daemon start which flight plans wait from before.
In the echo area, and in the chat those not shown waiting in an open
chat (where they have their keys): a plan waiting silently is a person
who never hears of it."
  (unless (passepartout--connection-announced conn)
    (setf (passepartout--connection-announced conn) t)
    (let* ((result (ignore-errors
                     (jsonrpc-request conn :_passepartout/plans/list nil :timeout 10)))
           (plans (append (plist-get result :plans) nil))
           (unseen (cl-remove-if
                    (lambda (p)
                      (buffer-live-p (gethash (plist-get p :planId)
                                              passepartout-chat--plan-chats)))
                    plans)))
      (when unseen
        (passepartout-chat--note
         (format "%d flight plan%s wait%s for you from before (M-x passepartout-plans):%s"
                 (length unseen)
                 (if (cdr unseen) "s" "")
                 (if (cdr unseen) "" "s")
                 (mapconcat (lambda (p)
                              (format "\n- %s %s" (plist-get p :planId)
                                      (plist-get p :title)))
                            unseen ""))))
      (when plans
        (message "passepartout: %d flight plan%s wait%s for you: M-x passepartout-plans"
                 (length plans) (if (cdr plans) "s" "") (if (cdr plans) "" "s"))))))

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
      (let ((heading (point)))
        (insert "* You\n")
        ;; Everything above the prompt is the transcript.
        (passepartout-chat--protect (point-min) (point))
        ;; Made after the insertion: a marker that advances on insertion
        ;; would otherwise have moved past "* You", and a note put
        ;; "before the heading" would land in the prompt and be sent.
        ;; Advancing is right from now on: a note inserted at the
        ;; heading stays above it.
        (setq passepartout-chat--prompt-heading (copy-marker heading t)))
      (setq passepartout-chat--prompt (copy-marker (point))))))

(defun passepartout-chat--protect (start end)
  "Make the text from START to END part of the read-only transcript."
  (let ((inhibit-read-only t))
    (with-silent-modifications
      (add-text-properties start end passepartout-chat--protected))))

(defconst passepartout-chat--streamed-properties
  (append '(fontified t) passepartout-chat--protected)
  "Text properties of streamed answer text until its turn ends.
`fontified' t tells jit-lock the text needs no fontification: Org's
font-lock works on whole lines, so a chunk appended to a long line
would refontify all of it, at every chunk, while the person types.
The turn's end hands the text back to jit-lock (see
`passepartout-chat--refontify').")

(defun passepartout-chat--insert (text &optional streamed)
  "Insert TEXT, read-only, at the stream marker; windows at it follow it.
The stream marker sits above the prompt, so what the person types below
never mixes with the answer.  STREAMED non-nil says TEXT is answer or
reasoning text: it is left unfontified until the turn ends, and no
change hook runs for it (none has anything to do with read-only text
that grows at a marker, and jit-lock's would undo `fontified')."
  (let* ((stream passepartout-chat--stream)
         (inhibit-read-only t)
         (here-at-end (= (point) stream))
         (followers (cl-remove-if-not
                     (lambda (w) (= (window-point w) stream))
                     (get-buffer-window-list nil nil t))))
    (save-excursion
      (goto-char stream)
      (let ((start (point)))
        (if (not streamed)
            (progn (insert text)
                   (passepartout-chat--protect start (point)))
          (passepartout-chat--unsaved-from start)
          ;; Done by the change hooks that are not run.
          (syntax-ppss-flush-cache start)
          ;; The chunk is ours (parsed from JSON for this insertion):
          ;; propertized in place, it is not copied once more.
          (add-text-properties 0 (length text)
                               passepartout-chat--streamed-properties text)
          (passepartout-chat--fold-long-line
           text (- start (line-beginning-position)))
          (let ((inhibit-modification-hooks t))
            (insert text)))))
    (when here-at-end (goto-char stream))
    (dolist (w followers) (set-window-point w stream))))

(defconst passepartout-chat--insert-budget 0.004
  "Seconds of insertion a timer run may take before input gets its turn.")

(defconst passepartout-chat--drain-delay 0.015
  "Seconds between the arrival of answer text and its display.
Text arriving meanwhile is shown in the same run, and redisplayed once.")

(defun passepartout-chat--enqueue (kind text)
  "Queue answer TEXT of KIND (`message' or `thought') for display."
  (push (cons kind text) passepartout-chat--pending)
  (unless passepartout-chat--drain-timer
    (setq passepartout-chat--drain-timer
          (run-at-time passepartout-chat--drain-delay nil
                       #'passepartout-chat--drain (current-buffer)))))

(defun passepartout-chat--drain (buffer)
  "Show BUFFER's queued text for at most `passepartout-chat--insert-budget'.
It stops early when input is pending, and runs again later for the
rest: a keystroke never waits for more than one budget of insertion."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq passepartout-chat--drain-timer nil)
      (passepartout-chat--show-pending
       (+ (float-time) passepartout-chat--insert-budget))
      (when passepartout-chat--pending
        (setq passepartout-chat--drain-timer
              (run-at-time passepartout-chat--drain-delay nil
                           #'passepartout-chat--drain buffer))))))

(defun passepartout-chat--show-pending (&optional deadline)
  "Insert the queued text, oldest first, until DEADLINE (`float-time').
Without DEADLINE, insert all of it: what comes next in the turn (a tool
call, a note, its end) must follow the text received before it.  With
one, stop early when input is pending, after at least one piece."
  (when passepartout-chat--pending
    (let ((items (nreverse passepartout-chat--pending)))
      (setq passepartout-chat--pending nil)
      (while (and items passepartout-chat--stream
                  (let ((item (pop items)))
                    (if (eq (car item) 'thought)
                        (passepartout-chat-insert-thought (cdr item))
                      (passepartout-chat-insert-message (cdr item)))
                    (or (not deadline)
                        (and (< (float-time) deadline)
                             (not (input-pending-p)))))))
      ;; Text received while showing (a filter run inside an insertion
      ;; hook) is newer than what is left.
      (setq passepartout-chat--pending
            (and passepartout-chat--stream
                 (nconc passepartout-chat--pending (nreverse items)))))))

(defun passepartout-chat--flush ()
  "Show all queued answer text now."
  (when passepartout-chat--drain-timer
    (cancel-timer passepartout-chat--drain-timer)
    (setq passepartout-chat--drain-timer nil))
  (passepartout-chat--show-pending))

(defconst passepartout-chat--long-line 4000
  "Characters of a line of an answer shown; the rest is folded.
Org's font-lock fontifies whole lines, and Emacs 28's redisplay walks a
truncated line to its end, character by character, every time it
shows it: a line of a megabyte would stall both at every chunk.
Folded (invisible) text is skipped in one step.  The folded rest of a
line is shown by `passepartout-chat-show-long-lines'; it is never
fontified.")

(defun passepartout-chat--fold-long-line (text column)
  "Make the part of TEXT past `passepartout-chat--long-line' invisible.
TEXT is inserted at COLUMN of its first line."
  (let ((start 0)
        (length (length text)))
    (while (< start length)
      (let* ((newline (string-search "\n" text start))
             (end (or newline length))
             (hidden (+ start (max 0 (- passepartout-chat--long-line column)))))
        (when (< hidden end)
          (put-text-property hidden end 'invisible 'passepartout-long-line text))
        (setq start (1+ end)
              column 0)))))

(defun passepartout-chat-show-long-lines (&optional arg)
  "Show the folded rest of long answer lines; with ARG negative, fold it.
Showing a line of a megabyte makes each redisplay of it slow."
  (interactive "P")
  (if (and arg (< (prefix-numeric-value arg) 0))
      (add-to-invisibility-spec '(passepartout-long-line . t))
    (remove-from-invisibility-spec '(passepartout-long-line . t))))

(defun passepartout-chat--refontify (start end)
  "Hand the text from START to END back to jit-lock, but for long lines.
Only what a window shows is then fontified, when it is shown.  Long
lines are found by their folded tails, not by walking every line."
  (with-silent-modifications
    (put-text-property start end 'fontified nil)
    (save-excursion
      (let ((pos start))
        (while (setq pos (text-property-any pos end 'invisible 'passepartout-long-line))
          (goto-char pos)
          ;; Its newline too: font-lock extends a region to whole lines,
          ;; so fontifying from the newline would fontify the line.
          (let ((eol (min end (1+ (line-end-position)))))
            (put-text-property (line-beginning-position) eol 'fontified t)
            (setq pos eol)))))))

(defun passepartout-chat--org-safe (text)
  "Return TEXT with line-start stars that would open an Org heading demoted.
A Markdown bullet \"* item\" would otherwise end the answer's section.
Stars at the end of TEXT wait in `passepartout-chat--held' until the
next chunk shows whether a space follows them.  Cost: linear in TEXT."
  (if (and (string-empty-p passepartout-chat--held)
           (not (string-search "*" text)))
      text
    (passepartout-chat--org-safe-stars text)))

(defun passepartout-chat--org-safe-stars (text)
  "Return TEXT, which may hold stars, as `passepartout-chat--org-safe' does."
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
  ;; Whatever ends the section comes after the text received before it.
  (passepartout-chat--flush)
  (unless (string-empty-p passepartout-chat--held)
    (let ((held passepartout-chat--held))
      (setq passepartout-chat--held "")
      (passepartout-chat--insert held t)))
  (when (eq (car-safe passepartout-chat--segment) 'thought)
    (passepartout-chat--ensure-newline)
    (passepartout-chat--fold (cdr passepartout-chat--segment)))
  (setq passepartout-chat--segment nil))

(defun passepartout-chat--ensure-newline ()
  "Make the stream start on a fresh line."
  (unless (eq (char-before passepartout-chat--stream) ?\n)
    ;; As streamed text: a change hook would refontify the whole line
    ;; it ends, which may be megabytes long.
    (passepartout-chat--insert (string ?\n) t)))

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
  (passepartout-chat--insert (passepartout-chat--org-safe text) t)
  (passepartout-chat--save-soon))

(defun passepartout-chat-insert-thought (text)
  "Append reasoning TEXT to the running turn of the current chat buffer."
  (unless (eq (car-safe passepartout-chat--segment) 'thought)
    (passepartout-chat--close-segment)
    (setq passepartout-chat--segment
          (cons 'thought (passepartout-chat--open-heading "Reasoning"))))
  (passepartout-chat--insert (passepartout-chat--org-safe text) t)
  (passepartout-chat--save-soon))

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
        (insert line "\n")
        (passepartout-chat--protect (- (point) (length line) 1) (point))))))

(defconst passepartout-chat--notice-regexp
  "\\`⚠ [0-9]+ errors? in skill or policy files: .*\n\\(?:  .*\n\\)*\n?"
  "The daemon's warning about broken skill files, at the start of a turn.
It arrives as reasoning (`agent_thought_chunk'), as ACP has no notice;
the model never said it.  A daemon that marks it in `_meta' is
recognised by that instead (`passepartout-chat--daemon-notice-p').")

(defun passepartout-chat--daemon-notice-p (update)
  "Non-nil when UPDATE is a notice of the daemon's, not the model's reasoning.
The daemon marks one with `_meta.passepartout.notice'."
  (plist-get (plist-get (plist-get update :_meta) :passepartout) :notice))

(defun passepartout-chat--split-notice (text)
  "Return (NOTICE . REST): the daemon's warning at the start of TEXT, and the rest.
NOTICE is nil when TEXT does not start with one: it is then all reasoning."
  (if (string-match passepartout-chat--notice-regexp text)
      (cons (string-trim-right (match-string 0 text))
            (substring text (match-end 0)))
    (cons nil text)))

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
                                           (plist-get item :content))))
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
        ;; A call whose flight plan was resolved keeps the plan's outcome.
        (unless (plist-get tool :plan-outcome)
          (passepartout-chat--tool-set-keyword tool keyword))
        (when text
          (save-excursion
            (let ((end (plist-get tool :end)))
              (goto-char end)
              (insert (passepartout-chat--example text))
              (set-marker end (point)))))
        (let ((effect (plist-get (plist-get update :rawOutput) :effect))
              (diffs (passepartout-chat--diffs-text (plist-get update :content))))
          (when (or effect (not (string-empty-p diffs)))
            (save-excursion
              (let ((end (plist-get tool :end)))
                (goto-char end)
                (when effect
                  (insert (passepartout-chat--effect-summary effect) "\n"))
                (let ((diff-start (point)))
                  (insert diffs)
                  (set-marker end (point))
                  ;; Each diff folded on its own, to open with TAB.
                  (goto-char diff-start)
                  (while (re-search-forward "^\\*\\*\\* " end t)
                    (passepartout-chat--fold (line-beginning-position))
                    (end-of-line)))))))
        (when (member keyword '("DONE" "FAILED"))
          (passepartout-chat--fold (plist-get tool :heading)))))))

(defun passepartout-chat--tool-set-keyword (tool keyword)
  "Show KEYWORD (a string, or nil for no change) in TOOL's heading."
  (when (and keyword (not (equal keyword (plist-get tool :current))))
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (plist-get tool :keyword))
        (delete-char (length (plist-get tool :current)))
        (insert keyword)
        (passepartout-chat--protect (- (point) (length keyword)) (point))))
    (plist-put tool :current keyword)))

(defun passepartout-chat--gate-trace (org)
  "Return the gate trace section's body of flight plan ORG, or nil."
  (when (and org (string-match "^\\*\\* Gate trace\n" org))
    (let* ((start (match-end 0))
           (end (if (string-match "^\\*+ " org start) (match-beginning 0) (length org)))
           (body (string-trim (substring org start end))))
      (and (not (string-empty-p body)) (concat body "\n")))))

(defun passepartout-chat--tool-waiting (tool-call-id plan-id &optional org)
  "Mark TOOL-CALL-ID's section as waiting for flight plan PLAN-ID.
ORG, the plan's text, gives the gate trace shown with it.  The lines
carry the keys of `passepartout-chat-plan-map'."
  (passepartout-chat--flush)
  (when-let ((tool (or (passepartout-chat--tool-of-plan plan-id)
                       (gethash tool-call-id passepartout-chat--tools))))
    (let ((inhibit-read-only t)
          (trace (passepartout-chat--gate-trace org)))
      (save-excursion
        (passepartout-chat--tool-set-keyword tool "WAITING")
        (when-let ((old (plist-get tool :plan-line)))
          (delete-region (car old) (cdr old)))
        (let* ((end (plist-get tool :end))
               (start (progn (goto-char end) (point-marker))))
          (insert (format "Waiting for flight plan %s: " plan-id)
                  (substitute-command-keys
                   "\\<passepartout-chat-plan-map>\\[passepartout-chat-approve-plan] approve, \\[passepartout-chat-reject-plan] reject, \\[passepartout-chat-open-plan] open the plan to edit it.\n")
                  (if trace (concat "Gate trace:\n" trace) ""))
          (set-marker end (point))
          (passepartout-chat--arm-plan tool plan-id start (point) trace))))))

(defun passepartout-chat--arm-plan (tool plan-id start end trace)
  "Give TOOL's section the keys of waiting flight plan PLAN-ID.
The plan's lines run from START to END; TRACE is its gate trace."
  (dolist (key '(:overlay :face-overlay))
    (when-let ((ov (plist-get tool key))) (delete-overlay ov)))
  ;; The keys work from the WAITING heading down; only the lines about
  ;; the plan are highlighted.
  (let ((ov (make-overlay (plist-get tool :heading) end nil nil nil))
        (face (make-overlay start end nil nil nil)))
    (overlay-put ov 'keymap passepartout-chat-plan-map)
    (overlay-put ov 'passepartout-plan-id plan-id)
    (overlay-put face 'face 'highlight)
    (plist-put tool :overlay ov)
    (plist-put tool :face-overlay face))
  (plist-put tool :plan-id plan-id)
  (plist-put tool :trace trace)
  (plist-put tool :plan-line (cons (copy-marker start) (copy-marker end)))
  (puthash plan-id (current-buffer) passepartout-chat--plan-chats))

(defun passepartout-chat--tool-of-plan (plan-id)
  "Return the tool section of this chat that waits or waited for PLAN-ID."
  (catch 'found
    (maphash (lambda (_id tool)
               (when (equal (plist-get tool :plan-id) plan-id)
                 (throw 'found tool)))
             passepartout-chat--tools)
    nil))

(defconst passepartout-chat--waiting-regexp
  "^Waiting for flight plan \\([^ :\n]+\\): "
  "The first line of a flight plan waiting in a chat; group 1 is its id.")

(defun passepartout-chat--revive-plans ()
  "Give the plans shown waiting in this chat's text their keys again.
For a chat read from its file: its sections have no markers or
overlays yet.  Return the ids of the plans found."
  (let ((inhibit-read-only t)
        (ids nil))
    (save-excursion
      (goto-char (point-min))
      (while (re-search-forward passepartout-chat--waiting-regexp nil t)
        (let* ((plan-id (match-string-no-properties 1))
               (start (match-beginning 0))
               (heading (save-excursion (re-search-backward "^\\*\\* " nil t)))
               (end (save-excursion
                      (goto-char start)
                      (goto-char (if (re-search-forward "^\\*+ " nil t)
                                     (match-beginning 0)
                                   (point-max)))
                      (skip-chars-backward "\n")
                      (min (point-max) (1+ (point)))))
               (call-id (and heading
                             (save-excursion
                               (goto-char heading)
                               (and (re-search-forward "^:TOOL_CALL_ID: *\\(.*\\)$" start t)
                                    (match-string-no-properties 1))))))
          (when (and heading (save-excursion (goto-char heading)
                                             (looking-at-p "\\*\\* WAITING ")))
            (let ((tool (list :heading (copy-marker heading)
                              :keyword (copy-marker (+ heading 3))
                              :current "WAITING"
                              :end (copy-marker end)))
                  (trace (save-excursion
                           (goto-char start)
                           (and (re-search-forward "^Gate trace:\n" end t)
                                (buffer-substring-no-properties (point) end)))))
              (puthash (or call-id plan-id) tool passepartout-chat--tools)
              (passepartout-chat--arm-plan tool plan-id start end trace)
              (push plan-id ids)))
          (goto-char (max (point) end)))))
    (nreverse ids)))

(defun passepartout-chat--tool-plan-resolved (tool-call-id plan-id status &optional edited)
  "Say in TOOL-CALL-ID's section that flight plan PLAN-ID ended as STATUS.
EDITED non-nil says the person edited the action before approving it.
The chat's file is saved: it must not say WAITING after a restart."
  (passepartout-chat--flush)
  (when-let* ((tool (or (passepartout-chat--tool-of-plan plan-id)
                        (gethash tool-call-id passepartout-chat--tools)))
              (line (plist-get tool :plan-line)))
    (let ((inhibit-read-only t))
      (dolist (key '(:overlay :face-overlay))
        (when-let ((ov (plist-get tool key)))
          (delete-overlay ov)
          (plist-put tool key nil)))
      (save-excursion
        (let ((end-follows (= (plist-get tool :end) (cdr line))))
          (goto-char (car line))
          (delete-region (car line) (cdr line))
          (insert (format "Flight plan %s: %s%s.\n" plan-id status
                          (if edited " (edited by you)" ""))
                  (let ((trace (plist-get tool :trace)))
                    (if trace (concat "Gate trace:\n" trace) "")))
          (set-marker (cdr line) (point))
          (passepartout-chat--protect (car line) (point))
          (when end-follows (set-marker (plist-get tool :end) (point)))))
      ;; The heading says what became of the plan, also when its turn is
      ;; gone (a restart, another daemon ran it) and no tool call update
      ;; follows.
      (when-let ((keyword (cdr (assoc status passepartout-chat--plan-keywords))))
        (passepartout-chat--tool-set-keyword tool keyword)
        (plist-put tool :plan-outcome status)))
    (when (eq (gethash plan-id passepartout-chat--plan-chats) (current-buffer))
      (remhash plan-id passepartout-chat--plan-chats))
    (passepartout-chat--save-later 0)
    t))

(defun passepartout-chat-plan-buffer (plan)
  "Return the live chat buffer showing flight PLAN (the daemon's object), or nil.
Found by the plan's id first (a resumed chat, whatever its session),
then by its session."
  (let ((b (or (gethash (plist-get plan :planId) passepartout-chat--plan-chats)
               (gethash (plist-get plan :sessionId) passepartout-chat--sessions))))
    (and (buffer-live-p b) b)))

(defun passepartout-chat--files-of-session (session-id)
  "Return the chat files whose top drawer names SESSION-ID."
  (let ((dir passepartout-chat-directory))
    (when (and dir (file-directory-p dir))
      (cl-remove-if-not
       (lambda (file)
         (with-temp-buffer
           (insert-file-contents file nil 0 passepartout-chat--header-bytes)
           (equal (passepartout-chat--get-property "PASSEPARTOUT_SESSION") session-id)))
       (directory-files dir t "\\`[^.#].*\\.org\\'")))))

(defun passepartout-chat-resolve-in-file (session-id plan-id status)
  "Write STATUS, the outcome of flight plan PLAN-ID, in SESSION-ID's chat files.
For a plan decided while its chat is not open: the file must not say
it waits.  Return the files changed."
  (let (changed)
    (dolist (file (passepartout-chat--files-of-session session-id) changed)
      (with-temp-buffer
        (insert-file-contents file)
        (setq-local passepartout-chat--tools (make-hash-table :test #'equal))
        (setq-local passepartout-chat--plan-chats (make-hash-table :test #'equal))
        (when (and (member plan-id (passepartout-chat--revive-plans))
                   (let ((passepartout-chat--file nil))
                     (passepartout-chat--tool-plan-resolved nil plan-id status)))
          (let ((coding-system-for-write 'utf-8-unix))
            (write-region nil nil file nil 'silent))
          (push file changed))))))

(defun passepartout-chat--tool-retitle (tool-call-id title)
  "Show TITLE, the action that actually ran, in TOOL-CALL-ID's heading.
An action the person edited in its flight plan is not the one the
model asked for; the heading must not keep the model's."
  (when-let ((tool (gethash tool-call-id passepartout-chat--tools)))
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (+ (plist-get tool :keyword) (length (plist-get tool :current))))
        (when (eq (char-after) ?\s) (forward-char))
        (let ((start (point)))
          (delete-region start (line-end-position))
          (insert (replace-regexp-in-string "[\n\r]+" " " title))
          (passepartout-chat--protect start (point)))))))

(defun passepartout-chat--plan-at-point ()
  "Return the id of the flight plan waiting at point, or signal."
  (or (cl-some (lambda (ov) (overlay-get ov 'passepartout-plan-id))
               (overlays-at (point)))
      (user-error "No flight plan waits here")))

(defun passepartout-chat-approve-plan ()
  "Approve the flight plan waiting at point.
If its plan buffer holds your edits, the edited action is what you approve."
  (interactive)
  (let* ((id (passepartout-chat--live-plan-at-point))
         (buffer (plist-get (gethash id passepartout-plan--plans) :buffer))
         (org (and (buffer-live-p buffer) (buffer-modified-p buffer)
                   (with-current-buffer buffer
                     (save-restriction
                       (widen)
                       (buffer-substring-no-properties (point-min) (point-max)))))))
    (passepartout-plan--decide id "approve" org nil)))

(defun passepartout-chat-reject-plan (reason)
  "Reject the flight plan waiting at point, telling the model REASON."
  (interactive (progn (passepartout-chat--live-plan-at-point)
                      (list (read-string "Reason for rejecting (optional): "))))
  (passepartout-plan--decide (passepartout-chat--plan-at-point) "reject" nil
                             (and reason (not (string-empty-p reason)) reason)))

(defun passepartout-chat-open-plan ()
  "Show the full flight plan waiting at point, to read or edit it."
  (interactive)
  (pop-to-buffer (passepartout-plan-buffer (passepartout-chat--live-plan-at-point))))

(defun passepartout-chat--live-plan-at-point ()
  "Return the id of the flight plan waiting at point, known to a live daemon.
A chat read from its file shows plans from before the restart: the
daemon is started (it offers them again), and a plan it no longer
lists is marked as decided elsewhere."
  (let ((id (passepartout-chat--plan-at-point)))
    (unless (equal (plist-get (gethash id passepartout-plan--plans) :status) "pending")
      (passepartout--ensure-connection)
      (passepartout-plans--sync)
      (unless (gethash id passepartout-plan--plans)
        (passepartout-chat--tool-plan-resolved nil id "decided elsewhere")
        (user-error "Flight plan %s no longer waits: it was decided elsewhere" id)))
    id))

;;;; Effects on files

(defun passepartout-chat--effect-summary (effect)
  "Return a one-line summary of EFFECT, a tool call's `rawOutput.effect'."
  (let ((count (lambda (key) (length (plist-get effect key)))))
    (format "Changed files: %d created, %d modified, %d deleted (+%s/-%s bytes)%s"
            (funcall count :created) (funcall count :modified) (funcall count :deleted)
            (or (plist-get effect :bytes_added) 0)
            (or (plist-get effect :bytes_removed) 0)
            (if-let ((c (plist-get effect :checkpoint)))
                (format ", checkpoint %s" c)
              ""))))

(defun passepartout-chat--unified-diff (old new)
  "Return a unified diff from OLD to NEW text, or nil without diff(1)."
  (when-let ((diff (executable-find "diff")))
    (let ((a (make-temp-file "passepartout-old"))
          (b (make-temp-file "passepartout-new")))
      (unwind-protect
          (progn
            (let ((coding-system-for-write 'utf-8-unix))
              (write-region (or old "") nil a nil 'silent)
              (write-region (or new "") nil b nil 'silent))
            (with-temp-buffer
              (let ((coding-system-for-read 'utf-8-unix))
                (call-process diff nil t nil "-u" "--label" "before" "--label" "after" a b))
              (buffer-string)))
        (delete-file a)
        (delete-file b)))))

(defun passepartout-chat--diffs-text (content)
  "Return Org text for the diff items in CONTENT: one folded section each."
  (mapconcat
   (lambda (item)
     (if (not (equal (plist-get item :type) "diff"))
         ""
       (let ((old (plist-get item :oldText))
             (new (plist-get item :newText)))
         (concat "*** " (if old "Diff" "New file") ": "
                 (replace-regexp-in-string "[\n\r]+" " " (or (plist-get item :path) "?"))
                 "\n#+begin_src diff\n"
                 (org-escape-code-in-string
                  (string-trim-right
                   (or (passepartout-chat--unified-diff old new)
                       (concat "+" (replace-regexp-in-string "\n" "\n+" (or new ""))))
                   "\n+"))
                 "\n#+end_src\n"))))
   content ""))

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

(defun passepartout-chat--suspend-element-cache ()
  "Turn Org's element cache off in this buffer while a turn streams.
Org 9.7 (Emacs 30) updates the cache before and after every change by
searching from the start of the changed line: each chunk of a long
one-line answer cost time proportional to the line (a 1 MB line took
minutes).  The answer is read-only text that nothing parses while it
streams, so the cache is off until the turn ends and then rebuilt
lazily (`passepartout-chat--resume-element-cache')."
  (when (and org-element-use-cache (not passepartout-chat--element-cache))
    (setq passepartout-chat--element-cache
          (list org-element-use-cache (local-variable-p 'org-element-use-cache)))
    (setq-local org-element-use-cache nil)))

(defun passepartout-chat--resume-element-cache ()
  "Turn Org's element cache back on, emptied: it missed the turn's changes."
  (when passepartout-chat--element-cache
    ;; A global setting stays global: the buffer follows it again.
    (if (cadr passepartout-chat--element-cache)
        (setq-local org-element-use-cache (car passepartout-chat--element-cache))
      (kill-local-variable 'org-element-use-cache))
    (setq passepartout-chat--element-cache nil)
    (org-element-cache-reset)))

(defun passepartout-chat-begin-turn ()
  "Open the answer section of a new turn, and a new prompt below it.
The answer streams above the new \"* You\" heading: the person can
write the next prompt while it streams, and what they type never mixes
with it (the transcript is read-only)."
  (passepartout-chat--suspend-element-cache)
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char (point-max))
      (unless (bolp) (insert "\n"))
      (setq passepartout-chat--turn-start (copy-marker (point)))
      (insert "\n* passepartout\n")
      ;; Not advancing while the prompt is inserted after it; advancing
      ;; from then on, so the answer's text lands before the marker.
      (let ((stream (point-marker)))
        (passepartout-chat--new-prompt)
        (set-marker-insertion-type stream t)
        (setq passepartout-chat--stream stream
              passepartout-chat--segment nil
              passepartout-chat--held ""
              passepartout-chat--plan nil
              passepartout-chat--compacting nil)))
    (passepartout-chat--hold-gc)
    (goto-char (point-max))))

(defun passepartout-chat-end-turn (&optional note)
  "Finish the running turn, with NOTE if non-nil."
  (when passepartout-chat--stream
    (when note (passepartout-chat--note note))
    (passepartout-chat--close-segment)
    ;; A blank line between the answer and the next "* You".
    (passepartout-chat--ensure-newline)
    ;; Point anywhere in the turn's output (it may sit in a section that
    ;; has just folded) goes to the prompt, so typing lands there; a point
    ;; already in the prompt stays where the person left it.
    (let* ((start (or passepartout-chat--turn-start passepartout-chat--stream))
           (in-turn (lambda (pos) (and (>= pos start) (< pos passepartout-chat--prompt))))
           (move (or (funcall in-turn (point)) (invisible-p (point))))
           (windows (cl-remove-if-not
                     (lambda (w) (funcall in-turn (window-point w)))
                     (get-buffer-window-list nil nil t))))
      (passepartout-chat--protect start passepartout-chat--prompt)
      (passepartout-chat--refontify start passepartout-chat--prompt)
      (set-marker passepartout-chat--stream nil)
      (setq passepartout-chat--stream nil
            passepartout-chat--plan nil)
      (passepartout-chat--release-gc)
      (passepartout-chat--resume-element-cache)
      (when move (goto-char (point-max)))
      (dolist (w windows) (set-window-point w (point-max))))
    (when passepartout-chat--save-timer
      (cancel-timer passepartout-chat--save-timer)
      (setq passepartout-chat--save-timer nil))
    ;; What is left to write may be megabytes: then it is written in the
    ;; background, in pieces.
    (if (<= (- (point-max) (if passepartout-chat--saved
                               (car passepartout-chat--saved)
                             (point-min)))
            passepartout-chat--save-piece)
        (passepartout-chat-save)
      (passepartout-chat--save-later 0))
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
                (concat "Error: " (passepartout-chat--for-emacs
                                   (passepartout--error-message error))))))))))))

(defconst passepartout-chat--emacs-hint
  "In Emacs: M-x passepartout-menu picks the provider and model for this session; to change the default, set `passepartout-program-args' (e.g. (\"serve\" \"--provider-url\" \"http://127.0.0.1:8080/v1\" \"--model\" \"NAME\")) or edit ~/.config/passepartout/config.toml, then M-x passepartout-restart."
  "What to do about a provider problem, said the Emacs way.")

(defun passepartout-chat--for-emacs (text)
  "Return the daemon's error TEXT with the Emacs way of fixing it added.
The daemon names its command-line flags, which an Emacs user never types."
  (if (string-match-p "--provider-url\\|no model provider" text)
      (concat text "\n" passepartout-chat--emacs-hint)
    text))

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
        ;; Session state arrives whether a turn runs or not.
        (pcase (plist-get update :sessionUpdate)
          ("current_mode_update"
           (setq passepartout-chat--modes
                 (plist-put (copy-sequence passepartout-chat--modes)
                            :currentModeId (plist-get update :currentModeId)))
           (force-mode-line-update))
          ("available_commands_update"
           (setq passepartout-chat--commands
                 (append (plist-get update :availableCommands) nil))))
        ;; Updates after the turn ended (or before it began) have no place.
        (when passepartout-chat--stream
          (pcase (plist-get update :sessionUpdate)
            ("agent_message_chunk"
             (when-let ((text (passepartout-chat--text-of (plist-get update :content))))
               (passepartout-chat--enqueue 'message text)))
            ("agent_thought_chunk"
             (when-let ((text (passepartout-chat--text-of (plist-get update :content))))
               (if (passepartout-chat--daemon-notice-p update)
                   (passepartout-chat--note (string-trim-right text))
                 (pcase-let ((`(,notice . ,rest) (passepartout-chat--split-notice text)))
                   (when notice (passepartout-chat--note notice))
                   (unless (string-empty-p rest)
                     (passepartout-chat--enqueue 'thought rest))))))
            ("tool_call" (passepartout-chat--tool-start update))
            ("tool_call_update" (passepartout-chat--tool-update update))
            ("plan" (passepartout-chat--plan-update (plist-get update :entries)))))))))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/usage)) params)
  "Show the token use and cost in PARAMS in its chat buffer's mode line."
  (when-let ((buffer (passepartout-chat--session-buffer params)))
    (with-current-buffer buffer
      (setq passepartout-chat--usage params)
      (force-mode-line-update))))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/session/status)) params)
  "Show the session status in PARAMS in its chat buffer's mode line.
Compacting, a request the person did not write, is also said in the
turn: it is what runs, and what \\[passepartout-chat-cancel] cancels."
  (when-let ((buffer (passepartout-chat--session-buffer params)))
    (with-current-buffer buffer
      (setq passepartout-chat--status params)
      (when (and passepartout-chat--stream
                 (equal (plist-get params :state) "compacting")
                 (not passepartout-chat--compacting))
        (passepartout-chat--close-segment)
        (passepartout-chat--ensure-newline)
        (let ((start (copy-marker passepartout-chat--stream)))
          (passepartout-chat--insert
           (substitute-command-keys
            ": Compacting the conversation: the model summarises the earlier turns before it answers (\\<passepartout-chat-mode-map>\\[passepartout-chat-cancel] cancels)…\n"))
          (setq passepartout-chat--compacting
                (cons start (copy-marker passepartout-chat--stream)))))
      (force-mode-line-update))))

(defun passepartout-chat--compacted-text (params)
  "Return the one line telling of the compaction in PARAMS.
The summary itself is not shown (it is the model's, and may be long):
only how big it is."
  (let ((summary (plist-get params :summary))
        (trimmed (or (plist-get params :trimmedToolOutputs) 0)))
    (format "Compacted the conversation from %s to %s tokens (window %s): %s."
            (passepartout-chat--tokens (plist-get params :tokensBefore))
            (passepartout-chat--tokens (plist-get params :tokensAfter))
            (passepartout-chat--tokens (plist-get params :window))
            (string-join
             (delq nil
                   (list (and (stringp summary) (not (string-empty-p summary))
                              (format "earlier turns replaced by a summary of about %s tokens"
                                      (passepartout-chat--tokens
                                       (ceiling (length summary) 4))))
                         (and (> trimmed 0)
                              (format "%d old tool output%s cut" trimmed
                                      (if (= trimmed 1) "" "s")))))
             ", "))))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/session/compacted)) params)
  "Say in one line of the chat that the history was compacted, as PARAMS tell."
  (when-let ((buffer (passepartout-chat--session-buffer params)))
    (with-current-buffer buffer
      (let ((text (passepartout-chat--compacted-text params)))
        (if-let ((line passepartout-chat--compacting))
            (let ((inhibit-read-only t))
              (save-excursion
                (goto-char (car line))
                (delete-region (car line) (cdr line))
                (insert ": " text "\n")
                (passepartout-chat--protect (car line) (point))))
          (passepartout-chat--note text))))))

;;;; Session modes and slash commands

;;;###autoload (autoload 'passepartout-set-mode "passepartout" nil t)
(defun passepartout-set-mode (mode-id)
  "Switch this chat's session to the mode MODE-ID.
Interactively, choose among the modes the daemon advertised: read-only
\(nothing in the project can change), ask (every action but a read asks
you) or auto (what the gates allow runs in the sandbox).  The next action
is judged in the new mode."
  (interactive
   (progn
     (unless (derived-mode-p 'passepartout-chat-mode)
       (user-error "Not in a passepartout chat buffer"))
     (passepartout-chat--ensure-session)
     (let* ((modes (append (plist-get passepartout-chat--modes :availableModes) nil))
            (choices (mapcar (lambda (m)
                               (cons (format "%s — %s" (plist-get m :id)
                                             (or (plist-get m :description) ""))
                                     (plist-get m :id)))
                             modes))
            (choice (completing-read
                     (format "Mode (now %s): "
                             (plist-get passepartout-chat--modes :currentModeId))
                     choices nil t)))
       (list (or (cdr (assoc choice choices)) choice)))))
  (let ((id (passepartout-chat--ensure-session)))
    ;; The mode line follows the daemon's `current_mode_update', sent
    ;; before this answer.
    (jsonrpc-request passepartout-chat--connection :session/set_mode
                     (list :sessionId id :modeId mode-id))
    (message "passepartout: session mode %s" mode-id)))

(defun passepartout-chat--command-capf ()
  "Complete a slash command at the start of the prompt.
For `completion-at-point-functions': the commands come from the skills,
as the daemon announced them."
  (when (and passepartout-chat--prompt passepartout-chat--commands
             (>= (point) passepartout-chat--prompt))
    (save-excursion
      (let ((end (point)))
        (skip-chars-backward "A-Za-z0-9_-")
        (when (and (eq (char-before) ?/)
                   (save-excursion
                     (backward-char)
                     (skip-chars-backward " \t\n")
                     (<= (point) passepartout-chat--prompt)))
          (let ((table (mapcar (lambda (c) (plist-get c :name))
                               passepartout-chat--commands))
                (commands passepartout-chat--commands))
            (list (point) end table
                  :exclusive 'no
                  :annotation-function
                  (lambda (name)
                    (when-let ((c (seq-find (lambda (c) (equal (plist-get c :name) name))
                                            commands)))
                      (concat "  " (plist-get c :description)))))))))))

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

(defun passepartout-chat--save-all ()
  "Write every chat with unsaved text to its file (when Emacs exits).
Every chat buffer: a project may have an older chat open beside its
current one."
  (dolist (buffer (buffer-list))
    (when (and (eq (buffer-local-value 'major-mode buffer) 'passepartout-chat-mode)
               (buffer-modified-p buffer))
      (with-current-buffer buffer (passepartout-chat-save)))))


(provide 'passepartout-chat)
;;; passepartout-chat.el ends here
