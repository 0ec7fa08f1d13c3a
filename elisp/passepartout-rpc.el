;;; passepartout-rpc.el --- Connection to the passepartout daemon  -*- lexical-binding: t; -*-

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

;; The one connection between Emacs and `passepartout serve', built on
;; `jsonrpc-process-connection'.  There is a single daemon per Emacs:
;; sessions are per project, and one process serves them all.
;;
;; JSON-RPC messages can be logged to the events buffer
;; (`passepartout-events'); the daemon's standard error goes to the buffer
;; `*passepartout stderr*'.  API keys travel only in `initialize' and are
;; redacted before a message reaches the events buffer.  The events
;; buffer is off by default (`passepartout-events-buffer-size' 0): it
;; costs more than showing the answer.  When on, each message is one
;; printed line, never pretty-printed.
;;
;; Notifications from the daemon are dispatched to the generic function
;; `passepartout--handle-notification', specialised on the method symbol
;; by the chat and plan modules.  The daemon never holds a request open
;; to Emacs: a person's decision travels as a request from Emacs.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'json)
(require 'auth-source)
(require 'subr-x)

;; The package's one customisation group: every file requires this one.
(defgroup passepartout nil
  "A local-first, safety-first LLM agent beside Emacs."
  :group 'tools
  :prefix "passepartout-"
  :link '(url-link :tag "Protocol" "docs/protocol.md"))

(defcustom passepartout-program nil
  "The passepartout executable, or nil to find it.
When nil, the variable `exec-path' is searched, then the build output
of the source checkout this package lives in (target/release, then
target/debug)."
  :type '(choice (const :tag "Find it" nil) file)
  :group 'passepartout)

(defcustom passepartout-program-args '("serve")
  "Arguments given to `passepartout-program'.
Add e.g. \"--provider-url\" URL \"--model\" NAME to choose a provider
without a configuration file."
  :type '(repeat string)
  :group 'passepartout)

(defcustom passepartout-auth-hosts
  '(("anthropic" . "api.anthropic.com")
    ("openai" . "api.openai.com"))
  "Providers whose API keys are looked up with auth-source.
Each element is (PROVIDER . HOST): PROVIDER is a provider name in the
daemon's configuration, HOST the `:host' of its auth-source entry, e.g.
the line \"machine api.anthropic.com password sk-...\" in ~/.authinfo.gpg."
  :type '(alist :key-type (string :tag "Provider")
                :value-type (string :tag "Host"))
  :group 'passepartout)

(defcustom passepartout-events-buffer-size 0
  "Characters kept in the events buffer (\\[passepartout-events]).
0, the default, logs nothing: logging costs more than showing the
answer.  nil keeps everything.  \\[passepartout-events] turns logging
on for the running daemon when it is off."
  :type '(choice (const :tag "No limit" nil) integer)
  :group 'passepartout)

(defcustom passepartout-events-on-demand-size (* 2 1024 1024)
  "Characters kept when \\[passepartout-events] turns the log on."
  :type 'integer
  :group 'passepartout)

(defconst passepartout--package-directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "Directory this package was loaded from.
In a source checkout the daemon's build output is next to it.")


(defconst passepartout--stderr-buffer-name "*passepartout stderr*"
  "Name of the buffer holding the daemon's standard error.")

(defvar passepartout--connection nil
  "The connection to the daemon, or nil before the first start.
It may hold a dead connection: see `passepartout--live-connection'.")

(defvar passepartout--shutting-down nil
  "Non-nil while the person stops the daemon on purpose.")

(defvar passepartout-connection-started-hook nil
  "Hook run after the daemon has started and answered `initialize'.
Functions take one argument, the connection.")

(defvar passepartout-connection-died-hook nil
  "Hook run when the daemon stops.
Functions take two arguments: the connection and a one-line reason.")

(defclass passepartout-connection (jsonrpc-process-connection)
  ((secrets
    :initform nil
    :accessor passepartout--connection-secrets
    :documentation "Strings never to leave in the events buffer.")
   (process
    :initform nil
    :accessor passepartout--connection-process
    :documentation "The daemon's process (jsonrpc's slot for it is private).")
   (events-size
    :initform 0
    :accessor passepartout--connection-events-size
    :documentation "Characters kept in the events log; 0 is off, nil no limit.")
   (incoming
    :initform nil
    :accessor passepartout--connection-incoming
    :documentation "Output of the daemon not yet logged: a plist of
:chunks (newest first), their :size in bytes, and the bytes :need'ed
to complete the frame they start, when its header has arrived.")
   (server-info
    :initform nil
    :accessor passepartout--connection-server-info
    :documentation "The result of `initialize'.")
   (sandbox
    :initform nil
    :accessor passepartout--connection-sandbox
    :documentation "The last `_passepartout/sandbox/status' params.")
   (announced
    :initform nil
    :accessor passepartout--connection-announced
    :documentation "Non-nil once the plans waiting from before were announced."))
  :documentation "A connection to `passepartout serve'.")

;;;; Org src blocks of shell code

(declare-function sh-mode "sh-script")
(defvar org-src-lang-modes)

(defun passepartout--quiet-sh-mode ()
  "`sh-mode' for fontifying a shell src block, without its messages.
Org fontifies a src block by calling its language's mode in a hidden
buffer; `sh-mode' then says \"Indentation setup for shell type bash\"
each time, which is noise in the person's echo area."
  (let ((inhibit-message t)
        (message-log-max nil))
    (sh-mode))
  ;; Org calls the mode again unless `major-mode' is the one it asked for.
  (setq major-mode 'passepartout--quiet-sh-mode))

(defun passepartout--quiet-src-blocks ()
  "Fontify this Org buffer's shell src blocks with `passepartout--quiet-sh-mode'.
For the package's Org buffers that show shell code: flight plans and
skill files."
  (setq-local org-src-lang-modes
              (append '(("bash" . passepartout--quiet-sh)
                        ("sh" . passepartout--quiet-sh)
                        ("shell" . passepartout--quiet-sh))
                      (bound-and-true-p org-src-lang-modes))))

;;;; Finding the daemon

(defun passepartout--find-program ()
  "Return the daemon's executable, or signal a `user-error'.
`passepartout-program' wins; then the variable `exec-path'; then
the build output of the source checkout this package lives in."
  (or (and passepartout-program
           (let ((p (expand-file-name passepartout-program)))
             (unless (file-executable-p p)
               (user-error "The passepartout-program `%s' is not executable" p))
             p))
      (executable-find "passepartout")
      (cl-loop for profile in '("release" "debug")
               for p = (expand-file-name
                        (format "../target/%s/passepartout" profile)
                        passepartout--package-directory)
               when (file-executable-p p) return p)
      (user-error "Cannot find the passepartout program: %s"
                  "install it on `exec-path' or set `passepartout-program'")))

;;;; API keys

(defun passepartout--api-keys ()
  "Return a plist of provider name keyword to API key, from auth-source.
Providers and hosts come from `passepartout-auth-hosts'."
  (let (keys)
    (pcase-dolist (`(,provider . ,host) passepartout-auth-hosts)
      (when-let* ((found (car (auth-source-search :host host :max 1)))
                  (secret (plist-get found :secret))
                  (key (if (functionp secret) (funcall secret) secret)))
        (when (and (stringp key) (not (string-empty-p key)))
          (setq keys (plist-put keys (intern (concat ":" provider)) key)))))
    keys))

;;;; The events buffer
;;
;; The log is ours on every Emacs, fed from jsonrpc's public surface and
;; from our own process, never by advising jsonrpc's private functions
;; (`jsonrpc--log-event' changed its arguments in Emacs 30):
;;
;; - what Emacs sends: a `:before' method of the public generic
;;   `jsonrpc-connection-send', specialised on our connection class;
;; - what the daemon sends: a function added to our own process's
;;   filter, which reads the Content-Length frames jsonrpc reads.
;;
;; jsonrpc's own events log stays off (size 0) on every version: it
;; pretty-prints (slow on Emacs 28, see `passepartout--log-line') and it
;; could not redact.  Secrets are redacted from each line before it
;; reaches a buffer.  The lines go to jsonrpc's events buffer (the public
;; `jsonrpc-events-buffer'), so there is one buffer however it is opened.

(defconst passepartout--events-trim-slack 4
  "Trim the events buffer to 1 - 1/N of its limit when it overflows.
Trimming in one go after many messages keeps its cost per message
constant, where trimming one message at a time would walk the buffer
on every message.")

(defun passepartout--jsonrpc-log-off ()
  "Return the initargs that turn jsonrpc's own events log off.
A jsonrpc with `jsonrpc-event-hook' (1.0.25 in Emacs 30.1) takes
`:events-buffer-config' and warns that `:events-buffer-scrollback-size'
is deprecated; older ones (1.0.14 in Emacs 28.2) know only the latter.
The test is on the feature, not on the Emacs version: jsonrpc is also
installed from GNU ELPA."
  (if (boundp 'jsonrpc-event-hook)
      (list :events-buffer-config (list :size 0 :format 'short))
    (list :events-buffer-scrollback-size 0)))

(defun passepartout--secret-forms (secret)
  "Return SECRET and the forms it takes when printed or JSON-encoded.
A key with a quote, a backslash or a non-ASCII character is escaped in
a printed message; each spelling is redacted."
  (delete-dups
   (list secret
         (substring (prin1-to-string secret) 1 -1)
         (let ((print-escape-newlines t))
           (substring (prin1-to-string secret) 1 -1))
         (substring (json-encode-string secret) 1 -1))))

(defun passepartout--add-secret (conn secret)
  "Never show SECRET, in any of its spellings, in CONN's events log."
  (dolist (form (passepartout--secret-forms secret))
    (unless (string-empty-p form)
      (cl-pushnew form (passepartout--connection-secrets conn) :test #'equal))))

(defun passepartout--redact (conn text)
  "Return TEXT with CONN's secrets replaced by <redacted>."
  (let ((case-fold-search nil))
    (dolist (secret (passepartout--connection-secrets conn) text)
      (when (string-search secret text)
        (setq text (string-replace secret "<redacted>" text))))))

(defun passepartout--logging-p (conn)
  "Non-nil when CONN's events are logged."
  (let ((size (passepartout--connection-events-size conn)))
    (or (null size) (cl-plusp size))))

(defun passepartout--log-line (conn origin message text)
  "Append one line to CONN's events buffer and trim it.
ORIGIN is `client' or `server', MESSAGE the message as a plist (for its
kind, id and error) and TEXT its printed form.  One line per message,
never `pp': on Emacs 28 `pp-to-string' gets slower with every call (it
leaks into `hook--depth-alist'), so a long session would slow down
quadratically.  Secrets are redacted before the text reaches the buffer."
  (let* ((max (passepartout--connection-events-size conn))
         (method (plist-get message :method))
         (id (plist-get message :id))
         (error (plist-get message :error))
         (kind (cond ((and method id) "request")
                     (method "notification")
                     (id "reply")
                     (t "message")))
         (line (passepartout--redact
                conn
                (format "[%s-%s]%s%s %s: %s\n"
                        origin kind
                        (if id (format " (id:%s)" id) "")
                        (if error " ERROR" "")
                        (format-time-string "%T.%3N")
                        text))))
    (with-current-buffer (jsonrpc-events-buffer conn)
      (let ((inhibit-read-only t))
        (save-excursion
          (goto-char (point-max))
          (insert (if error (propertize line 'face 'error) line)))
        (when (and max (> (buffer-size) max))
          (save-excursion
            (goto-char (- (point-max)
                          (- max (/ max passepartout--events-trim-slack))))
            (forward-line 1)
            (delete-region (point-min) (point))))))))

(cl-defmethod jsonrpc-connection-send :before
  ((conn passepartout-connection) &rest message &key method &allow-other-keys)
  "Log MESSAGE, about to be sent on CONN, when its log is on."
  (when (passepartout--logging-p conn)
    (let ((message (copy-sequence message)))
      (when (keywordp method)
        (setq message (plist-put message :method (substring (symbol-name method) 1))))
      (passepartout--log-line
       conn 'client message
       (let ((print-length nil) (print-level nil) (print-escape-newlines t))
         (prin1-to-string message))))))

(defun passepartout--parse-json (text)
  "Return the JSON object in TEXT as a plist, or nil if it is not JSON."
  (ignore-errors
    (if (fboundp 'json-parse-string)
        (json-parse-string text :object-type 'plist :null-object nil
                           :false-object :json-false)
      (let ((json-object-type 'plist) (json-array-type 'vector)
            (json-key-type 'keyword) (json-false :json-false) (json-null nil))
        (json-read-from-string text)))))

(defconst passepartout--frame-header-regexp
  "Content-Length: *\\([0-9]+\\)\r\n\\(?:[^\r\n]*\r\n\\)*?\r\n"
  "The header of a JSON-RPC frame; group 1 is the body's length in bytes.
JSON escapes line breaks, so this never matches inside a body: after
logging is turned on in the middle of a frame, the next header is found.")

(defconst passepartout--frame-header-max 64
  "Bytes to keep of output with no frame header: one could start in them.")

(defun passepartout--log-frames (conn bytes)
  "Log the whole frames in BYTES (unibyte) on CONN; return what is left.
The rest is an incomplete frame starting at its header, or the tail of
output with no header, where the next one may begin."
  (let ((start 0) (rest nil))
    (while (not rest)
      (if (not (string-match passepartout--frame-header-regexp bytes start))
          (setq rest (substring bytes (max start (- (length bytes)
                                                    passepartout--frame-header-max))))
        (let* ((body (match-end 0))
               (end (+ body (string-to-number (match-string 1 bytes)))))
          (if (> end (length bytes))
              (setq rest (substring bytes (match-beginning 0)))
            (let ((text (decode-coding-string (substring bytes body end) 'utf-8)))
              (passepartout--log-line conn 'server (passepartout--parse-json text) text))
            (setq start end)))))
    rest))

(defun passepartout--log-incoming (conn output)
  "Log the messages completed by OUTPUT, text the daemon wrote, on CONN.
Added to the filter of CONN's process: jsonrpc reads the same frames.
The output of a long frame is kept in pieces and joined once, when the
frame is whole: joining at every piece would copy it over and over."
  (if (not (passepartout--logging-p conn))
      (setf (passepartout--connection-incoming conn) nil)
    (let* ((state (passepartout--connection-incoming conn))
           (chunks (cons (encode-coding-string output 'utf-8-emacs-unix t)
                         (plist-get state :chunks)))
           (size (+ (length (car chunks)) (or (plist-get state :size) 0)))
           (need (plist-get state :need)))
      (if (and need (< size need))
          (setf (passepartout--connection-incoming conn)
                (list :chunks chunks :size size :need need))
        (let ((rest (passepartout--log-frames
                     conn (apply #'concat (nreverse chunks)))))
          (setf (passepartout--connection-incoming conn)
                (list :chunks (list rest)
                      :size (length rest)
                      :need (and (string-match passepartout--frame-header-regexp rest)
                                 (= (match-beginning 0) 0)
                                 (+ (match-end 0)
                                    (string-to-number (match-string 1 rest)))))))))))

(defun passepartout--events-on (conn size)
  "Log CONN's messages from now on, keeping SIZE characters (nil: all).
Return non-nil if the log was off."
  (unless (passepartout--logging-p conn)
    (setf (passepartout--connection-events-size conn) size)
    t))

;;;; Starting and stopping

(defun passepartout--live-connection ()
  "Return the daemon connection if its process is alive, else nil."
  (and passepartout--connection
       (jsonrpc-running-p passepartout--connection)
       passepartout--connection))

(defconst passepartout--log-line-regexp
  "^[0-9]\\{4\\}-[0-9][0-9]-[0-9][0-9]T[0-9:.]+Z +\\([A-Z]+\\) "
  "A line of the daemon's log; group 1 is its level.")

(defconst passepartout--stderr-error-lines 12
  "At most this many lines of the daemon's last error are shown.")

(defun passepartout--drain-stderr (conn)
  "Read what is still in the pipe of CONN's standard error.
A daemon's last words can arrive after the sentinel has seen it exit."
  (when-let* ((buffer (ignore-errors (jsonrpc-stderr-buffer conn)))
              (pipe (and (buffer-live-p buffer) (get-buffer-process buffer))))
    (with-timeout (0.5 nil)
      (while (process-live-p pipe)
        (accept-process-output pipe 0.02)))))

(defun passepartout--stderr-error (conn)
  "Return the daemon's last error on CONN's stderr, or nil.
That is its fatal message (from the last line starting with
\"passepartout: \" to the end, so a multi-line message is whole) or,
failing that, its last ERROR log line.  Ordinary log lines are never
returned: they would explain nothing."
  (passepartout--drain-stderr conn)
  (when-let ((buffer (ignore-errors (jsonrpc-stderr-buffer conn))))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (save-excursion
          (goto-char (point-max))
          (cond
           ((re-search-backward "^passepartout: " nil t)
            (let ((start (point)) (lines 0))
              ;; The message runs until the next log line.
              (forward-line 1)
              (while (and (not (eobp))
                          (< (cl-incf lines) passepartout--stderr-error-lines)
                          (not (looking-at-p passepartout--log-line-regexp)))
                (forward-line 1))
              (string-trim (buffer-substring-no-properties start (point)))))
           ((re-search-backward
             "^[0-9]\\{4\\}-[0-9][0-9]-[0-9][0-9]T[0-9:.]+Z +ERROR " nil t)
            (string-trim (buffer-substring-no-properties
                          (point) (line-end-position))))))))))

(defun passepartout--exit-reason (conn)
  "Return why the daemon behind CONN stopped, in a few words."
  (let* ((proc (passepartout--connection-process conn))
         (code (process-exit-status proc))
         (why (passepartout--stderr-error conn)))
    (concat (if (eq (process-status proc) 'signal)
                (format "was killed by signal %s" code)
              (format "exited with status %s" code))
            (if why (format " (%s)" why) ""))))

(defun passepartout--on-shutdown (conn)
  "Tell the person that the daemon behind CONN stopped."
  (let ((reason (passepartout--exit-reason conn)))
    (unless passepartout--shutting-down
      (message "passepartout: the daemon %s; M-x passepartout restarts it"
               reason))
    (run-hook-with-args 'passepartout-connection-died-hook conn
                        (if passepartout--shutting-down "stopped" reason))))

(defun passepartout--dispatch-notification (conn method params)
  "Hand notification METHOD with PARAMS from CONN to its handler.
A failing handler is reported without losing the messages after it."
  (condition-case-unless-debug err
      (passepartout--handle-notification conn method params)
    (error
     (message "passepartout: error handling %s: %s"
              method (error-message-string err)))))

(defun passepartout--dispatch-request (conn method params)
  "Answer request METHOD with PARAMS from CONN; return the result.
Decisions never arrive this way: a flight plan is a notification, and
the person's answer a request from Emacs."
  (passepartout--handle-request conn method params))

(cl-defgeneric passepartout--handle-notification (conn method params)
  "Handle notification METHOD, a symbol, with PARAMS from CONN."
  (:method (_conn _method _params) nil))

(cl-defgeneric passepartout--handle-request (conn method params)
  "Answer request METHOD, a symbol, with PARAMS from CONN.
Return the result; signal with `jsonrpc-error' to answer an error."
  (:method (_conn method _params)
           (jsonrpc-error :code -32601
                          :message (format "method not supported by Emacs: %s"
                                           method))))

;;;; The emacs actuator

(defun passepartout--read-forms (code)
  "Return the Emacs Lisp forms in the string CODE, wrapped in `progn'."
  (let ((pos 0) forms)
    (condition-case nil
        (while t
          (let ((read (read-from-string code pos)))
            (push (car read) forms)
            (setq pos (cdr read))))
      (end-of-file nil))
    (cons 'progn (nreverse forms))))

(cl-defmethod passepartout--handle-request
  (_conn (_method (eql '_passepartout/emacs/eval)) params)
  "Evaluate the code in PARAMS with its bindings; return its printed value.
The daemon sends this only for an action a person approved in a flight
plan (every Emacs Lisp tool asks).  The model's arguments arrive as
bindings, lexically bound to their names around the form, never pasted
into the code.  A string value is returned as is."
  (let ((code (plist-get params :code))
        (bindings (cl-loop for (key value) on (plist-get params :bindings) by #'cddr
                           collect (cons (intern (substring (symbol-name key) 1))
                                         value))))
    (condition-case err
        (let ((value (eval (passepartout--read-forms code) (or bindings t))))
          (list :value (if (stringp value) value (prin1-to-string value))))
      (error (jsonrpc-error :code -32603 :message (error-message-string err))))))

(cl-defmethod passepartout--handle-notification
  (conn (_method (eql '_passepartout/sandbox/status)) params)
  "Remember the sandbox status in PARAMS on CONN, and explain a problem."
  (setf (passepartout--connection-sandbox conn) params)
  (unless (eq (plist-get params :available) t)
    (message "passepartout: %s" (plist-get params :message))))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/sessions/pruned)) params)
  "Say which old sessions the journals' quota removed (PARAMS).
The daemon sends it once, when a new session took the session journals
past their quota (`[sessions]' in its config.toml): those sessions can
no longer be resumed."
  (message "passepartout: %s" (plist-get params :message)))

(cl-defmethod passepartout--handle-notification
  (_conn (_method (eql '_passepartout/mcp/server)) params)
  "Say that an MCP server of a session changed state (PARAMS).
The daemon sends it when a server that was running stops during a call
or refuses the session's token; its tools are no longer offered."
  (let ((server (plist-get params :server)))
    (message "passepartout: MCP server `%s' %s"
             (plist-get server :name)
             (let ((state (or (plist-get server :state) "")))
               (if (string-prefix-p "failed: " state)
                   (substring state (length "failed: "))
                 state)))))

(defun passepartout--initialize-params (keys)
  "Return the params of `initialize', with API KEYS when non-nil."
  (list :protocolVersion 1
        ;; fs/*: answered in passepartout-fs.el (buffers, then files).
        :clientCapabilities (list :fs (list :readTextFile t
                                            :writeTextFile t)
                                  :terminal :json-false
                                  ;; MCP servers' questions: asked in the
                                  ;; minibuffer (passepartout-elicit.el).
                                  :elicitation (list :form (make-hash-table)
                                                     :url (make-hash-table))
                                  ;; The `_passepartout/*' notifications
                                  ;; (status, usage, sandbox, compaction):
                                  ;; a plain ACP client gets none.
                                  :_meta (list :passepartout
                                               (list :notifications t)))
        :clientInfo (list :name "emacs" :version emacs-version)
        :_meta (list :passepartout
                     `(:flightPlans t :emacs t
                                    ,@(and keys (list :apiKeys keys))))))

(defun passepartout--start ()
  "Start the daemon, `initialize' it and return the connection."
  (let* ((program (passepartout--find-program))
         (command (cons program passepartout-program-args))
         (default-directory (expand-file-name "~/"))
         (process nil)
         (conn
          (progn
            ;; A fresh stderr buffer: jsonrpc hooks the old one to the
            ;; events buffer, and would copy every line twice.
            (when-let ((old (get-buffer passepartout--stderr-buffer-name)))
              (kill-buffer old))
            (apply
             #'make-instance
             'passepartout-connection
             :name "passepartout"
             :notification-dispatcher #'passepartout--dispatch-notification
             :request-dispatcher #'passepartout--dispatch-request
             :on-shutdown #'passepartout--on-shutdown
             :process
             (lambda ()
               (setq process
                     (make-process
                      :name "passepartout"
                      :command command
                      :connection-type 'pipe
                      :coding 'utf-8-emacs-unix
                      :noquery t
                      :file-handler nil
                      ;; jsonrpc expects stderr in a buffer named after the
                      ;; connection and hides it; it is shown again below.
                      :stderr (get-buffer-create passepartout--stderr-buffer-name))))
             (passepartout--jsonrpc-log-off))))
         (keys (passepartout--api-keys)))
    (setf (passepartout--connection-process conn) process
          (passepartout--connection-events-size conn) passepartout-events-buffer-size)
    (when (boundp 'jsonrpc-event-hook)
      ;; jsonrpc runs this hook in the connection's events buffer with
      ;; every message, `initialize' and its API keys included: here it
      ;; runs nothing, so no function of another package sees them.
      (with-current-buffer (jsonrpc-events-buffer conn)
        (setq-local jsonrpc-event-hook nil)))
    ;; Our events log reads what the daemon writes from the process's
    ;; filter; it goes with the process.
    (add-function :before (process-filter process)
                  (lambda (_process output) (passepartout--log-incoming conn output))
                  '((name . passepartout-events)))
    (with-current-buffer (jsonrpc-stderr-buffer conn)
      (rename-buffer passepartout--stderr-buffer-name t)
      ;; jsonrpc copies each stderr line into the events buffer, even
      ;; when logging is off; the log has its own buffer already.
      (kill-local-variable 'after-change-functions))
    (setq passepartout--connection conn
          passepartout--shutting-down nil)
    (cl-loop for (_provider key) on keys by #'cddr
             do (passepartout--add-secret conn key))
    (condition-case err
        (setf (passepartout--connection-server-info conn)
              (jsonrpc-request conn :initialize
                               (passepartout--initialize-params keys)
                               :timeout 30))
      ;; Not only `jsonrpc-error': a daemon that exits at once (a bad
      ;; argument) can be dead before `initialize' is written, and
      ;; sending to it signals a plain `error' from the process.
      (error
       (let ((msg (or (alist-get 'jsonrpc-error-message (cdr err))
                      (error-message-string err)))
             (why (passepartout--stderr-error conn)))
         (unless (or why (eq (car err) 'jsonrpc-error)
                     (not (process-live-p process)))
           (signal (car err) (cdr err)))
         ;; The daemon's own words first: jsonrpc only knows it died.
         (user-error "The passepartout daemon did not start: %s%s"
                     (or why msg)
                     (if why "" " (M-x passepartout-stderr shows its log)")))))
    (run-hook-with-args 'passepartout-connection-started-hook conn)
    conn))

(defun passepartout--ensure-connection ()
  "Return a live, initialized connection, starting the daemon if needed."
  (or (passepartout--live-connection)
      (passepartout--start)))

(defun passepartout--shutdown ()
  "Stop the daemon if it is running.  Pending flight plans stay on disk."
  (when-let ((conn (passepartout--live-connection)))
    (let ((passepartout--shutting-down t))
      ;; End of input is the daemon's shutdown signal; give it a moment
      ;; to cancel turns before jsonrpc kills it.
      (ignore-errors (process-send-eof (passepartout--connection-process conn)))
      (with-timeout (2 nil)
        (while (process-live-p (passepartout--connection-process conn))
          (accept-process-output (passepartout--connection-process conn) 0.05)))
      (jsonrpc-shutdown conn))))

(defun passepartout--request-async (method params &rest args)
  "Send request METHOD with PARAMS on the live connection, without waiting.
ARGS are `jsonrpc-async-request' keywords.  Signal a `user-error' when
the daemon is not running."
  (let ((conn (or (passepartout--live-connection)
                  (user-error "The passepartout daemon is not running: M-x passepartout"))))
    (apply #'jsonrpc-async-request conn method params args)))

(defun passepartout--notify (method params)
  "Send notification METHOD with PARAMS if the daemon is running."
  (when-let ((conn (passepartout--live-connection)))
    (jsonrpc-notify conn method params)))

(defun passepartout--error-message (error)
  "Return the message of a JSON-RPC ERROR object (a plist) or condition."
  (cond ((and (consp error) (keywordp (car error)))
         (or (plist-get error :message) (format "%S" error)))
        ((and (consp error) (eq (car error) 'jsonrpc-error))
         (or (alist-get 'jsonrpc-error-message (cdr error))
             (error-message-string error)))
        (t (format "%s" error))))

(provide 'passepartout-rpc)
;;; passepartout-rpc.el ends here
