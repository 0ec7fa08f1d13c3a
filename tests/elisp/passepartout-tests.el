;;; passepartout-tests.el --- ERT tests for passepartout.el  -*- lexical-binding: t; -*-

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

;; Tests against the real daemon and the real fake provider (see
;; passepartout-test-support.el), plus a few tests of the buffer logic
;; driven directly.  Run them with tests/elisp/run.sh.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)

;;;; Launch and chat

(ert-deftest passepartout-test-streamed-answer ()
  "A prompt sent with C-c C-c streams the answer into the Org buffer."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Hello" " from the" " fake model."))
    (let ((chat (passepartout-test--chat project)))
      (with-current-buffer chat
        (should (derived-mode-p 'org-mode))
        (should (eq major-mode 'passepartout-chat-mode))
        (should passepartout-chat--session-id))
      (passepartout-test--send chat "Say hello.")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30 "end of turn")
      (let ((text (passepartout-test--text chat)))
        (should (string-match-p
                 (regexp-quote "* You\nSay hello.\n\n* passepartout\nHello from the fake model.\n")
                 text))
        ;; A fresh prompt heading waits at the end.
        (should (string-suffix-p "\n* You\n" text)))
      ;; The prompt reached the model.
      (let* ((request (car (passepartout-test--requests)))
             (messages (plist-get (plist-get request :body) :messages))
             (last (aref messages (1- (length messages)))))
        (should (equal (plist-get last :role) "user"))
        (should (equal (plist-get last :content) "Say hello.")))
      ;; The mode line names the provider's state once the turn is done.
      (with-current-buffer chat
        (should (string-match-p "\\[idle" (passepartout-chat--mode-line)))))))

(ert-deftest passepartout-test-second-prompt-same-session ()
  "A second prompt in the same buffer goes to the same session."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "One.")
            (passepartout-test--text-reply "Two."))
    (let* ((chat (passepartout-test--chat project))
           (session (buffer-local-value 'passepartout-chat--session-id chat)))
      (passepartout-test--send chat "First?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (passepartout-test--send chat "Second?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (equal session (buffer-local-value 'passepartout-chat--session-id chat)))
      (should (string-match-p
               "\\* You\nFirst\\?\n\n\\* passepartout\nOne\\.\n\n\\* You\nSecond\\?\n\n\\* passepartout\nTwo\\.\n\n\\* You\n\\'"
               (passepartout-test--text chat)))
      ;; The second request carried the whole conversation.
      (let* ((second (nth 1 (passepartout-test--requests)))
             (messages (append (plist-get (plist-get second :body) :messages) nil))
             (last-three (last messages 3)))
        (should (equal (mapcar (lambda (m) (plist-get m :role)) last-three)
                       '("user" "assistant" "user")))
        (should (equal (mapcar (lambda (m) (plist-get m :content)) last-three)
                       '("First?" "One." "Second?")))))))

(ert-deftest passepartout-test-tool-call-section ()
  "A tool call appears as an Org section whose keyword follows its status."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_1" "read_file" '(:path "notes.txt"))
            (passepartout-test--text-reply "It says hi."))
    (with-temp-file (expand-file-name "notes.txt" project) (insert "hi\n"))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Read notes.txt")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (let ((text (passepartout-test--text chat)))
        (should (string-match-p "^\\*\\* DONE read_file" text))
        (should (string-match-p "^:TOOL_CALL_ID: call_1$" text))
        (should (string-match-p "#\\+begin_example\n\\(.*\n\\)*hi\n\\(.*\n\\)*#\\+end_example" text))
        (should (string-match-p "^\\*\\* Answer\nIt says hi\\.$" text)))
      ;; The completed section is folded.
      (with-current-buffer chat
        (goto-char (point-min))
        (re-search-forward "^\\*\\* DONE read_file")
        (end-of-line)
        (should (invisible-p (1+ (point))))))))

(ert-deftest passepartout-test-reasoning-folds ()
  "Reasoning streams into its own section, folded once the answer starts."
  (passepartout-test-with-daemon
      (list `(:type "open_ai" :delay_ms 5 :done t
                    :chunks [,(passepartout-test--chunk '(:reasoning_content "Let me"))
                             ,(passepartout-test--chunk '(:reasoning_content " think."))
                             ,(passepartout-test--chunk '(:content "Forty-two."))
                             ,(passepartout-test--chunk (make-hash-table) "stop")]))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Why?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (string-match-p
               "^\\* passepartout\n\\*\\* Reasoning\nLet me think\\.\n\\*\\* Answer\nForty-two\\.\n"
               (passepartout-test--text chat)))
      (with-current-buffer chat
        (goto-char (point-min))
        (re-search-forward "^\\*\\* Reasoning\n")
        (should (invisible-p (point)))
        (re-search-forward "^Forty-two")
        (should-not (invisible-p (point)))))))

(ert-deftest passepartout-test-cancel ()
  "C-c C-k cancels a turn whose model never answers."
  (passepartout-test-with-daemon
      (list (passepartout-test--hang-reply))
    (let ((chat (passepartout-test--chat project)))
      (passepartout-test--send chat "Take your time.")
      ;; The request reached the (hanging) model.
      (passepartout-test--wait-for (passepartout-test--requests) 20 "the request")
      (with-current-buffer chat
        (should passepartout-chat--stream)
        (call-interactively #'passepartout-chat-cancel))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 20 "cancellation")
      (should (string-match-p "^: Cancelled\\.$" (passepartout-test--text chat))))))

(ert-deftest passepartout-test-daemon-death-is-reported ()
  "Killing the daemon is reported in the chat buffer; M-x passepartout restarts it."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Back."))
    (let* ((chat (passepartout-test--chat project))
           (old-session (buffer-local-value 'passepartout-chat--session-id chat))
           (messages nil))
      (cl-letf (((symbol-function 'message)
                 (lambda (fmt &rest args)
                   (when fmt (push (apply #'format fmt args) messages)))))
        (signal-process (process-id (passepartout--connection-process passepartout--connection)) 'kill)
        (passepartout-test--wait-for (not (passepartout--live-connection)) 10 "death")
        (passepartout-test--wait-for
            (string-match-p "^: The daemon was killed by signal 9"
                            (passepartout-test--text chat))
          10 "the death note"))
      (should (cl-some (lambda (m) (string-match-p "daemon was killed by signal 9.*M-x passepartout" m))
                       messages))
      ;; Fix (8): an ordinary log line is no explanation of a death.
      (should-not (string-match-p "INFO\\|serving on stdio" (passepartout-test--text chat)))
      (should-not (cl-some (lambda (m) (string-match-p "INFO" m)) messages))
      (with-current-buffer chat
        (should (string-match-p "\\[stopped" (passepartout-chat--mode-line))))
      ;; Starting again resumes the session if the daemon can, else
      ;; gives the buffer a new one and says so; either way it works.
      (passepartout-test--chat project)
      (should (passepartout--live-connection))
      (if (passepartout-test--daemon-supports-load)
          (should (equal old-session
                         (buffer-local-value 'passepartout-chat--session-id chat)))
        (should-not (equal old-session
                           (buffer-local-value 'passepartout-chat--session-id chat)))
        (should (string-match-p (format "^: Could not resume session %s" old-session)
                                (passepartout-test--text chat))))
      (passepartout-test--send chat "Still there?")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (string-match-p "^Back\\.$" (passepartout-test--text chat))))))

(ert-deftest passepartout-test-api-key-never-in-events ()
  "An API key from auth-source reaches initialize but not the events buffer."
  (passepartout-test-with-daemon nil
    (let* ((secret "sk-test-5ecret-never-shown-42")
           (authinfo (expand-file-name "authinfo" passepartout-test--dir)))
      (with-temp-file authinfo
        (insert "machine api.example.test login apikey password " secret "\n"))
      (let ((auth-sources (list authinfo))
            (passepartout-events-buffer-size (* 1024 1024))
            (passepartout-auth-hosts '(("fake" . "api.example.test"))))
        (auth-source-forget-all-cached)
        (should (equal (passepartout--api-keys) (list :fake secret)))
        (passepartout-test--chat project))
      (let ((events (with-current-buffer (jsonrpc-events-buffer passepartout--connection)
                      (buffer-string))))
        (should (string-match-p "initialize" events))
        (should (string-match-p "apiKeys" events))
        (should (string-match-p "<redacted>" events))
        (should-not (string-match-p (regexp-quote secret) events)))
      (should-not (string-match-p (regexp-quote secret)
                                  (with-current-buffer passepartout--stderr-buffer-name
                                    (buffer-string)))))))

;; Run on every tested Emacs (tests/elisp/emacs-versions.sh): jsonrpc's
;; logging changed in Emacs 30, and our log must redact on each version.
(ert-deftest passepartout-test-api-key-in-no-buffer ()
  "After a whole turn with every log on, no buffer holds the API key.
Not the events buffer, the chat, the daemon's stderr and log file,
*Messages* or *Warnings*, nor a hidden buffer, nor one written by
another package's function on jsonrpc's global `jsonrpc-event-hook'
\(Emacs 30); and jsonrpc's own pretty-printing log stays off."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Hello."))
    (let* ((secret "sk-test-5ecret-in-no-buffer-77")
           (authinfo (expand-file-name "authinfo" passepartout-test--dir))
           (warnings-before (when (get-buffer "*Warnings*")
                              (with-current-buffer "*Warnings*" (buffer-size))))
           (spy (lambda (&rest event)
                  (with-current-buffer (get-buffer-create " *jsonrpc spy*")
                    (insert (format "%S\n" event))))))
      (when (boundp 'jsonrpc-event-hook)
        (add-hook 'jsonrpc-event-hook spy))
      (unwind-protect
          (progn
            (with-temp-file authinfo
              (insert "machine api.example.test login apikey password " secret "\n"))
            (let ((auth-sources (list authinfo))
                  (passepartout-events-buffer-size (* 1024 1024))
                  (passepartout-auth-hosts '(("fake" . "api.example.test"))))
              (auth-source-forget-all-cached)
              (let ((chat (passepartout-test--chat project)))
                (passepartout-test--send chat "Hi?")
                (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
                (should (string-match-p "^Hello\\.$" (passepartout-test--text chat)))))
            (save-window-excursion
              (passepartout-log)
              (let ((log (window-buffer (selected-window))))
                (unwind-protect
                    (let ((holding
                           (cl-loop for buffer in (buffer-list)
                                    when (with-current-buffer buffer
                                           (save-restriction
                                             (widen)
                                             (save-excursion
                                               (goto-char (point-min))
                                               (search-forward secret nil t))))
                                    collect (buffer-name buffer))))
                      (should (equal holding nil)))
                  (kill-buffer log))))
            (with-current-buffer (passepartout-events)
              (let ((events (buffer-string)))
                ;; Our log saw both directions and redacted the key...
                (should (string-match-p "^\\[client-request\\] (id:1) .*apiKeys.*<redacted>" events))
                (should (string-match-p "^\\[server-reply\\] (id:1) .*agentCapabilities" events))
                (should (string-match-p "^\\[server-notification\\] .*session/update" events))
                ;; ...and jsonrpc wrote nothing of its own: on Emacs 30
                ;; its lines start with "[jsonrpc]"; on 28 a header line
                ;; is followed by a pretty-printed plist over several
                ;; lines, so every line being one of ours rules both out.
                (should-not (string-match-p "^\\[jsonrpc\\]" events))
                (should (cl-every (lambda (line) (string-match-p "^\\[\\(client\\|server\\)-" line))
                                  (split-string events "\n" t)))))
            ;; No deprecation warning from jsonrpc on this Emacs.
            (when (get-buffer "*Warnings*")
              (with-current-buffer "*Warnings*"
                (should-not (string-match-p "deprecated"
                                            (buffer-substring (1+ (or warnings-before 0))
                                                              (point-max)))))))
        (when (boundp 'jsonrpc-event-hook)
          (remove-hook 'jsonrpc-event-hook spy))
        (when (get-buffer " *jsonrpc spy*")
          (kill-buffer " *jsonrpc spy*"))))))

(ert-deftest passepartout-test-secret-spellings ()
  "A key is redacted however a message prints it: raw, `prin1' or JSON."
  (let* ((key "sk-\"odd\\key\"-é")
         (forms (passepartout--secret-forms key))
         (message (list :_meta (list :apiKeys (list :fake key)))))
    (dolist (printed (list (prin1-to-string message)
                           (let ((print-escape-newlines t)) (prin1-to-string message))
                           (json-encode message)))
      (should (cl-some (lambda (form) (string-search form printed)) forms)))))

;; Run on every tested Emacs (tests/elisp/emacs-versions.sh): jsonrpc's
;; logging changed in Emacs 30, and our log must read the daemon's
;; frames itself on each version.
(ert-deftest passepartout-test-events-read-split-frames ()
  "Frames from the daemon are logged whole, however the output is split.
Also when logging starts in the middle of a frame, and with a character
of more than one byte (Content-Length counts bytes)."
  (let* ((stderr (get-buffer-create "*passepartout-frames stderr*"))
         (process nil)
         (conn (make-instance
                'passepartout-connection
                :name "passepartout-frames"
                :process (lambda ()
                           (setq process
                                 (make-process :name "passepartout-frames"
                                               :command '("cat")
                                               :connection-type 'pipe
                                               :noquery t
                                               :stderr stderr)))))
         (frame (lambda (json)
                  (format "Content-Length: %d\r\n\r\n%s"
                          (string-bytes (encode-coding-string json 'utf-8)) json)))
         (one "{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"text\":\"café\"}}")
         (two "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}")
         (output (concat
                  ;; The end of a frame whose start was not logged.
                  "ail\\r\\n\"}}"
                  (funcall frame one) (funcall frame two))))
    (unwind-protect
        (dolist (piece-size (list 1 7 64 (length output)))
          (with-current-buffer (jsonrpc-events-buffer conn)
            (let ((inhibit-read-only t)) (erase-buffer)))
          (setf (passepartout--connection-events-size conn) nil
                (passepartout--connection-incoming conn) nil)
          (cl-loop for start from 0 below (length output) by piece-size
                   do (passepartout--log-incoming
                       conn (substring output start
                                       (min (length output) (+ start piece-size)))))
          (let ((lines (split-string (with-current-buffer (jsonrpc-events-buffer conn)
                                       (buffer-string))
                                     "\n" t)))
            (should (equal (length lines) 2))
            (should (string-match-p "^\\[server-notification\\] .*: {.*\"café\"}}$"
                                    (nth 0 lines)))
            (should (string-match-p "^\\[server-reply\\] (id:7) .*\"ok\":true" (nth 1 lines)))))
      (delete-process process)
      (dolist (name '("*passepartout-frames events*" " *passepartout-frames output*"
                      " *passepartout-frames stderr*" "*passepartout-frames stderr*"))
        (when (get-buffer name) (kill-buffer name))))))

(ert-deftest passepartout-test-nothing-installed-until-used ()
  "No jsonrpc function is advised; `kill-emacs-hook' is ours only with a chat."
  (let (advised)
    (mapatoms (lambda (symbol)
                (when (and (fboundp symbol)
                           (string-prefix-p "jsonrpc" (symbol-name symbol)))
                  (advice-mapc (lambda (f _props) (push (cons symbol f) advised))
                               symbol))))
    (should (equal advised nil)))
  (let* ((passepartout-chat-directory nil)
         (root (make-temp-file "passepartout-hook" t))
         (chat (passepartout-chat-buffer root)))
    (unwind-protect
        (progn
          (should (memq #'passepartout-chat--save-all kill-emacs-hook))
          (kill-buffer chat)
          (should (equal (hash-table-count passepartout-chat--buffers) 0))
          (should-not (memq #'passepartout-chat--save-all kill-emacs-hook)))
      (when (buffer-live-p chat) (kill-buffer chat))
      (delete-directory root t))))

(ert-deftest passepartout-test-stderr-buffer ()
  "The daemon's standard error has its own visible buffer."
  (passepartout-test-with-daemon nil
    (let ((passepartout-events-buffer-size (* 1024 1024)))
      (passepartout-test--chat project))
    (should (get-buffer passepartout--stderr-buffer-name))
    (should (eq (get-buffer passepartout--stderr-buffer-name)
                (jsonrpc-stderr-buffer passepartout--connection)))
    (with-current-buffer (passepartout-events)
      (should (equal (buffer-name) "*passepartout events*"))
      (should (string-match-p "\\[client-request\\] (id:1)" (buffer-string)))
      (should (string-match-p ":method \"initialize\"" (buffer-string)))
      ;; One line per message, never pretty-printed.
      (goto-char (point-min))
      (re-search-forward "^\\[client-request\\] (id:1) .*:method \"initialize\".*:protocolVersion 1.*$"))))

(ert-deftest passepartout-test-log-file ()
  "`passepartout-log' opens the daemon's log file, which has its INFO lines."
  (passepartout-test-with-daemon nil
    (passepartout-test--chat project)
    (save-window-excursion
      (passepartout-log)
      (let ((log (window-buffer (selected-window))))
        (unwind-protect
            (with-current-buffer log
              (should (string-suffix-p "passepartout.log" (buffer-file-name)))
              (should (string-prefix-p (file-truename state)
                                       (file-truename (buffer-file-name))))
              (should buffer-read-only)
              (passepartout-test--wait-for
               (progn (revert-buffer t t t)
                      (string-match-p "session/new" (buffer-string)))
               10 "the session/new line in the log file"))
          ;; Its directory goes with the test.
          (kill-buffer log))))))

(ert-deftest passepartout-test-events-off-by-default ()
  "The events buffer logs nothing until `passepartout-events' turns it on."
  (passepartout-test-with-daemon nil
    (passepartout-test--chat project)
    (should (equal passepartout-events-buffer-size 0))
    (let ((events (jsonrpc-events-buffer passepartout--connection)))
      (should-not (string-match-p "client-request" (with-current-buffer events (buffer-string))))
      (let ((inhibit-message t)) (passepartout-events))
      (jsonrpc-request passepartout--connection :_passepartout/plans/list nil)
      (should (string-match-p "_passepartout/plans/list"
                              (with-current-buffer events (buffer-string)))))))

(ert-deftest passepartout-test-events-trimmed-in-bulk ()
  "A full events buffer is trimmed at message boundaries, below its limit."
  (passepartout-test-with-daemon nil
    (let ((passepartout-events-buffer-size 4000))
      (passepartout-test--chat project))
    (dotimes (_ 40)
      (jsonrpc-request passepartout--connection :_passepartout/plans/list nil))
    (with-current-buffer (jsonrpc-events-buffer passepartout--connection)
      (should (<= (buffer-size) 4000))
      (goto-char (point-min))
      (should (looking-at-p "\\[")))))

(ert-deftest passepartout-test-start-failure-explained ()
  "A daemon that cannot start is reported with its own explanation."
  (passepartout-test-with-daemon nil
    (let* ((passepartout-program-args '("serve" "--sandbox" "bogus"))
           (err (should-error (passepartout project) :type 'user-error)))
      (should (string-match-p "passepartout daemon did not start" (cadr err)))
      (should (string-match-p "bogus" (cadr err))))))

(ert-deftest passepartout-test-start-failure-exits-at-once ()
  "A daemon that exits before reading a byte is explained by its stderr.
It can be dead before `initialize' is written: sending then fails in
Emacs itself, which must still read as the daemon's own error."
  (passepartout-test-with-daemon nil
    (let ((script (expand-file-name "dies-at-once" passepartout-test--dir)))
      (with-temp-file script
        (insert "#!/bin/sh\n"
                "echo 'passepartout: unknown sandbox \"bogus\"' >&2\n"
                "exit 2\n"))
      (set-file-modes script #o755)
      (dotimes (_ 3)
        (let* ((passepartout-program script)
               (err (should-error (passepartout project) :type 'user-error)))
          (should (string-match-p "passepartout daemon did not start" (cadr err)))
          (should (string-match-p "unknown sandbox \"bogus\"" (cadr err))))))))

;;;; Flight plans

(defconst passepartout-test--rm-call
  '(:command "rm -r old")
  "A shell call that the built-in rules send to a person.")

(ert-deftest passepartout-test-plan-approve ()
  "A risky tool call opens a flight plan buffer; C-c C-c runs it."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call)
            (passepartout-test--text-reply "Removed."))
    (make-directory (expand-file-name "old" project))
    (let ((chat (passepartout-test--chat project))
          plan-id)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (let ((buffer (passepartout-plan-buffer plan-id)))
        (should (equal (buffer-name buffer) (format "*passepartout plan %s*" plan-id)))
        (with-current-buffer buffer
          (should (eq major-mode 'passepartout-plan-mode))
          (should (string-match-p "rm -r old" (buffer-string)))
          (should-not buffer-read-only)
          (should (eq (key-binding (kbd "C-c C-c")) #'passepartout-plan-approve))
          (call-interactively #'passepartout-plan-approve))
        (passepartout-test--wait-for
            (equal "executed" (plist-get (gethash plan-id passepartout-plan--plans) :status))
          30 "the plan's result")
        (with-current-buffer buffer
          (should buffer-read-only))
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
        (should-not (file-exists-p (expand-file-name "old" project)))
        (should (string-match-p (format "^Flight plan %s: executed\\.$" plan-id)
                                (passepartout-test--text chat)))
        (should (string-match-p "^Removed\\.$" (passepartout-test--text chat)))))))

(ert-deftest passepartout-test-plan-reject-reason-reaches-model ()
  "Rejecting a plan with a reason feeds the reason back to the model."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call)
            (passepartout-test--text-reply "Understood."))
    (make-directory (expand-file-name "old" project))
    (let ((chat (passepartout-test--chat project))
          plan-id)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (passepartout-plan-reject "keep old, it holds the backups"))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (file-exists-p (expand-file-name "old" project)))
      (should (equal "rejected"
                     (plist-get (gethash plan-id passepartout-plan--plans) :status)))
      (let* ((second (nth 1 (passepartout-test--requests)))
             (body (json-serialize (plist-get second :body))))
        (should (string-match-p "keep old, it holds the backups" body))))))

(defun passepartout-test--approve-edited (plan-id from to)
  "Replace FROM by TO in the action block of PLAN-ID's buffer, then approve."
  (with-current-buffer (passepartout-plan-buffer plan-id)
    (goto-char (point-min))
    (re-search-forward "^#\\+begin_src bash")
    (re-search-forward (regexp-quote from))
    (replace-match to t t)
    (passepartout-plan-approve)))

(ert-deftest passepartout-test-plan-edited-before-approval ()
  "The edited src block is what runs."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call)
            (passepartout-test--text-reply "Done."))
    (make-directory (expand-file-name "old" project))
    (let ((chat (passepartout-test--chat project))
          plan-id)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (passepartout-test--approve-edited plan-id "rm -r old" "mkdir made-by-edit")
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (equal "executed" (plist-get (gethash plan-id passepartout-plan--plans) :status)))
      (should (file-directory-p (expand-file-name "old" project)))
      (should (file-directory-p (expand-file-name "made-by-edit" project)))
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (should (string-match-p "^mkdir made-by-edit$" (buffer-string)))))))

(ert-deftest passepartout-test-plan-edit-denied ()
  "An edit that a gate denies does not run; the plan stays open to fix."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call)
            (passepartout-test--text-reply "Fine."))
    (make-directory (expand-file-name "old" project))
    (let ((chat (passepartout-test--chat project))
          plan-id)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (passepartout-test--approve-edited plan-id "rm -r old" "sudo rm -r old")
      (passepartout-test--wait-for
          (plist-get (gethash plan-id passepartout-plan--plans) :error) 30 "the refusal")
      (should (string-match-p "Never use sudo"
                              (plist-get (gethash plan-id passepartout-plan--plans) :error)))
      (passepartout-test--wait-for
          (equal "pending" (plist-get (gethash plan-id passepartout-plan--plans) :status))
        10 "the plan to be pending again")
      (with-current-buffer (passepartout-plan-buffer plan-id)
        (should-not buffer-read-only)
        (should (string-match-p "Never use sudo" (passepartout-plan--header-line)))
        (passepartout-plan-reject "never mind"))
      (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
      (should (equal "rejected" (plist-get (gethash plan-id passepartout-plan--plans) :status)))
      (should (file-directory-p (expand-file-name "old" project))))))

(ert-deftest passepartout-test-emacs-tool-runs-in-emacs ()
  "An Emacs Lisp tool, once approved, is evaluated by this Emacs."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_el" "emacs_buffer_text"
                                           '(:buffer " passepartout target"))
            (passepartout-test--text-reply "Read it."))
    (let ((target (get-buffer-create " passepartout target"))
          (chat (passepartout-test--chat project))
          plan-id)
      (unwind-protect
          (progn
            (with-current-buffer target (insert "text only Emacs knows"))
            (passepartout-test--send chat "What does the buffer say?")
            (setq plan-id
                  (passepartout-test--wait-for
                      (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
            (with-current-buffer (passepartout-plan-buffer plan-id)
              (should (string-match-p "#\\+begin_src emacs-lisp" (buffer-string)))
              (passepartout-plan-approve))
            (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
            (should (equal "executed"
                           (plist-get (gethash plan-id passepartout-plan--plans) :status)))
            (should (string-match-p "^text only Emacs knows$" (passepartout-test--text chat))))
        (kill-buffer target)))))

(ert-deftest passepartout-test-plan-survives-daemon-death ()
  "A pending plan outlives its daemon: offered again after restart, it runs once."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call))
    (make-directory (expand-file-name "old" project))
    (let ((chat (passepartout-test--chat project))
          (offers 0)
          plan-id buffer)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (setq buffer (passepartout-plan-buffer plan-id))
      ;; The person starts editing; then the daemon dies.
      (with-current-buffer buffer
        (goto-char (point-max))
        (insert "\nA note of mine.\n"))
      (let ((inhibit-message t))
        (signal-process (process-id (passepartout--connection-process passepartout--connection)) 'kill)
        (passepartout-test--wait-for (passepartout-test--idle-p chat) 10 "the turn to end"))
      (let ((passepartout-plan-offered-hook
             (list (lambda (id) (when (equal id plan-id) (cl-incf offers))))))
        (passepartout-test--chat project)
        (passepartout-test--wait-for (> offers 0) 20 "the plan offered again"))
      ;; Same buffer, edits kept, still to decide.
      (should (eq buffer (passepartout-plan-buffer plan-id)))
      (with-current-buffer buffer
        (should (string-match-p "A note of mine" (buffer-string)))
        (should-not buffer-read-only)
        ;; The note is outside the action block: the daemon ignores it,
        ;; which the person is told before approving (issue 41).
        (let ((asked nil))
          (cl-letf (((symbol-function 'yes-or-no-p) (lambda (q) (setq asked q) t)))
            (passepartout-plan-approve))
          (should (string-match-p "action as offered" asked))))
      (passepartout-test--wait-for
          (equal "executed" (plist-get (gethash plan-id passepartout-plan--plans) :status))
        30 "the orphan plan to run")
      (should-not (file-exists-p (expand-file-name "old" project))))))

(ert-deftest passepartout-test-plans-list ()
  "`passepartout-plans' lists pending plans; RET opens one."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_rm" "shell" passepartout-test--rm-call))
    (make-directory (expand-file-name "old" project))
    (let ((passepartout-plan-display 'notify)
          (chat (passepartout-test--chat project))
          plan-id)
      (passepartout-test--send chat "Remove old/")
      (setq plan-id
            (passepartout-test--wait-for
                (car (hash-table-keys passepartout-plan--plans)) 30 "a flight plan"))
      (with-current-buffer (passepartout-plans-list)
        (goto-char (point-min))
        (should (equal (tabulated-list-get-id) plan-id))
        (passepartout-plans-open)
        (should (equal (buffer-name) (format "*passepartout plan %s*" plan-id)))))))

;;;; Skills

(defconst passepartout-test--broken-skill
  "#+TITLE: broken
#+SKILL: broken
#+DESCRIPTION: A skill with mistakes.
#+PRIORITY: high

* broken_tool                                                          :tool:
:PROPERTIES:
:APPROVAL: ask
:END:
This tool has no body.
"
  "A skill with a bad priority (line 4) and a tool without a body (line 6).")

(ert-deftest passepartout-test-skill-flymake ()
  "A broken skill file shows flymake diagnostics at the right lines."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name "passepartout/skills/" (getenv "XDG_CONFIG_HOME")))
           (file (expand-file-name "broken.org" dir)))
      (should (equal (file-name-as-directory dir) (passepartout-skill-user-directory)))
      (make-directory dir t)
      (with-temp-file file (insert passepartout-test--broken-skill))
      (passepartout--ensure-connection)
      (let ((buffer (find-file-noselect file)))
        (unwind-protect
            (with-current-buffer buffer
              (org-mode)
              (passepartout-skill-mode-maybe)
              (should passepartout-skill-mode)
              (flymake-start)
              (let ((lines
                     (passepartout-test--wait-for
                         (when-let ((diags (flymake-diagnostics)))
                           (sort (mapcar (lambda (d)
                                           (line-number-at-pos (flymake-diagnostic-beg d)))
                                         diags)
                                 #'<))
                       20 "diagnostics")))
                (should (equal lines '(4 6)))
                (should (cl-every (lambda (d) (eq (flymake-diagnostic-type d) :error))
                                  (flymake-diagnostics)))))
          (with-current-buffer buffer (set-buffer-modified-p nil))
          (kill-buffer buffer))))))

(ert-deftest passepartout-test-new-skill-is-valid ()
  "The template of `passepartout-new-skill' passes the daemon's check."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name "skills/" passepartout-test--dir))
           (buffer (passepartout-skill-create "greeter" dir)))
      (unwind-protect
          (with-current-buffer buffer
            (should (file-exists-p (expand-file-name "greeter.org" dir)))
            (should passepartout-skill-mode)
            (let ((result (jsonrpc-request (passepartout--ensure-connection)
                                           :_passepartout/skills/check
                                           (list :path buffer-file-name
                                                 :text (buffer-string)))))
              (should (equal (plist-get result :diagnostics) []))))
        (kill-buffer buffer)))))

(ert-deftest passepartout-test-skill-save-reloads ()
  "Saving a skill file makes the daemon reload skills, the new one included."
  (passepartout-test-with-daemon nil
    (passepartout-test--chat project)
    (let* ((buffer (passepartout-skill-create "greeter" (passepartout-skill-user-directory)))
           (messages nil))
      (unwind-protect
          (cl-letf (((symbol-function 'message)
                     (lambda (fmt &rest args)
                       (when fmt (push (apply #'format fmt args) messages)))))
            (with-current-buffer buffer
              (goto-char (point-max))
              (insert "\nMore prose.\n")
              (save-buffer))
            (passepartout-test--wait-for
                (cl-find-if (lambda (m) (string-match-p "skills reloaded" m)) messages)
              20 "the reload")
            (should (cl-find-if (lambda (m) (string-match-p "skills reloaded (.*greeter" m))
                                messages)))
        (kill-buffer buffer)))))

;;;; Buffer logic, driven directly

(defun passepartout-test--update (session update)
  "Deliver session UPDATE (a plist) for SESSION as the daemon would."
  (passepartout--handle-notification
   nil 'session/update (list :sessionId session :update update)))

(ert-deftest passepartout-test-updates-in-place ()
  "Tool call updates and agent plans change their sections in place."
  (let ((buffer (passepartout-chat-buffer temporary-file-directory)))
    (unwind-protect
        (with-current-buffer buffer
          (setq passepartout-chat--session-id "s-test")
          (puthash "s-test" buffer passepartout-chat--sessions)
          (goto-char (point-max))
          (insert "Do two things.")
          (passepartout-chat-begin-turn)
          (passepartout-test--update
           "s-test" '(:sessionUpdate "plan"
                                     :entries [(:content "look" :status "in_progress")
                                               (:content "act" :status "pending")]))
          (passepartout-test--update
           "s-test" '(:sessionUpdate "tool_call" :toolCallId "c1" :title "shell: ls"
                                     :kind "execute" :status "pending"
                                     :rawInput (:command "ls")))
          (passepartout-test--update
           "s-test" '(:sessionUpdate "tool_call" :toolCallId "c2" :title "shell: rm -r old"
                                     :kind "execute" :status "pending"
                                     :rawInput (:command "rm -r old")))
          (passepartout-chat--tool-waiting "c2" "fp-9")
          (passepartout-chat--tool-plan-resolved "c2" "fp-9" "rejected")
          (passepartout-test--update
           "s-test" '(:sessionUpdate "tool_call_update" :toolCallId "c1" :status "in_progress"))
          (passepartout-test--update
           "s-test" '(:sessionUpdate "tool_call_update" :toolCallId "c1" :status "completed"
                                     :content [(:type "content"
                                                      :content (:type "text" :text "a\nb\n"))]))
          (passepartout-test--update
           "s-test" '(:sessionUpdate "plan"
                                     :entries [(:content "look" :status "completed")
                                               (:content "act" :status "in_progress")]))
          (passepartout-test--update
           "s-test" '(:sessionUpdate "tool_call_update" :toolCallId "c2" :status "failed"
                                     :content [(:type "content"
                                                      :content (:type "text" :text "rejected: no"))]))
          (passepartout-chat-end-turn)
          (should (equal
                   (buffer-substring-no-properties
                    (save-excursion (goto-char (point-min))
                                    (re-search-forward "^\\* passepartout\n")
                                    (point))
                    (point-max))
                   (concat "** Plan\n- [X] look\n- [-] act\n"
                           "** DONE shell: ls\n:PROPERTIES:\n:TOOL_CALL_ID: c1\n:KIND: execute\n:END:\n"
                           "#+begin_src json\n{\"command\":\"ls\"}\n#+end_src\n"
                           "#+begin_example\na\nb\n#+end_example\n"
                           "** REJECTED shell: rm -r old\n:PROPERTIES:\n:TOOL_CALL_ID: c2\n:KIND: execute\n:END:\n"
                           "#+begin_src json\n{\"command\":\"rm -r old\"}\n#+end_src\n"
                           "Flight plan fp-9: rejected.\n"
                           "#+begin_example\nrejected: no\n#+end_example\n"
                           "\n* You\n"))))
      (remhash "s-test" passepartout-chat--sessions)
      (kill-buffer buffer))))

;; Issue 18 item 5: the heading shows the plan's outcome, also when no
;; tool call update follows (a restart; another daemon ran the plan).
(ert-deftest passepartout-test-plan-outcome-in-heading ()
  "A resolved plan sets its call's heading: DONE, REJECTED, DENIED, INTERRUPTED."
  (let ((buffer (passepartout-chat-buffer temporary-file-directory)))
    (unwind-protect
        (with-current-buffer buffer
          (setq passepartout-chat--session-id "s-outcome")
          (puthash "s-outcome" buffer passepartout-chat--sessions)
          (goto-char (point-max))
          (insert "Four things.")
          (passepartout-chat-begin-turn)
          (pcase-dolist (`(,call ,plan ,status) '(("c1" "fp-1" "executed")
                                                  ("c2" "fp-2" "rejected")
                                                  ("c3" "fp-3" "denied")
                                                  ("c4" "fp-4" "interrupted")))
            (passepartout-test--update
             "s-outcome" (list :sessionUpdate "tool_call" :toolCallId call
                               :title (concat "shell: step " call)
                               :kind "execute" :status "pending"))
            (passepartout-chat--tool-waiting call plan)
            (passepartout-chat--tool-plan-resolved call plan status))
          ;; A late "failed" update for the rejected call changes nothing.
          (passepartout-test--update
           "s-outcome" '(:sessionUpdate "tool_call_update" :toolCallId "c2" :status "failed"))
          (passepartout-chat-end-turn)
          (let ((text (buffer-substring-no-properties (point-min) (point-max))))
            (should (string-match-p "^\\*\\* DONE shell: step c1$" text))
            (should (string-match-p "^\\*\\* REJECTED shell: step c2$" text))
            (should (string-match-p "^\\*\\* DENIED shell: step c3$" text))
            (should (string-match-p "^\\*\\* INTERRUPTED shell: step c4$" text))
            (should-not (string-match-p "WAITING\\|FAILED" text))))
      (remhash "s-outcome" passepartout-chat--sessions)
      (kill-buffer buffer))))

(ert-deftest passepartout-test-org-safe-stars ()
  "Markdown bullets never open Org headings, even split across chunks."
  (with-temp-buffer
    (passepartout-chat-mode)
    (insert "* passepartout\n")
    (setq passepartout-chat--stream (copy-marker (point) t)
          passepartout-chat--segment 'message)
    (dolist (chunk '("Items:\n" "*" " one\n** two\n*bold* and" " 2 * 3\n" "*"))
      (passepartout-chat-insert-message chunk))
    (passepartout-chat--close-segment)
    (should (equal (buffer-string)
                   "* passepartout\nItems:\n- one\n  - two\n*bold* and 2 * 3\n*"))))

(ert-deftest passepartout-test-plan-buffer-from-notifications ()
  "Offer and resolved notifications drive the plan buffer (no daemon)."
  (unwind-protect
      (let ((passepartout-plan-display 'notify)
            (inhibit-message t))
        (passepartout--handle-notification
         nil '_passepartout/plan/offer
         '(:plan (:planId "fp-1" :sessionId "s1" :toolCallId "c1" :tool "shell"
                          :title "shell: rm -r old" :status "pending"
                          :org "#+TITLE: Flight plan fp-1\n* TODO shell: rm -r old\n")))
        (let ((buffer (get-buffer "*passepartout plan fp-1*")))
          (should buffer)
          (with-current-buffer buffer
            (should (eq major-mode 'passepartout-plan-mode))
            (should-not buffer-read-only)
            (should (equal (assq :eval org-babel-default-header-args) '(:eval . "never"))))
          (passepartout--handle-notification
           nil '_passepartout/plan/resolved
           '(:planId "fp-1" :sessionId "s1" :status "executed" :result "exit 0"
                     :org "#+TITLE: Flight plan fp-1\n* DONE shell: rm -r old\n** Result\nexit 0\n"))
          (with-current-buffer buffer
            (should buffer-read-only)
            (should (string-match-p "^\\*\\* Result\nexit 0$" (buffer-string))))
          (should (equal (plist-get (gethash "fp-1" passepartout-plan--plans) :status)
                         "executed"))))
    (when (get-buffer "*passepartout plan fp-1*")
      (kill-buffer "*passepartout plan fp-1*"))
    (clrhash passepartout-plan--plans)))

(ert-deftest passepartout-test-emacs-eval ()
  "The emacs actuator's request evaluates with the arguments bound, never pasted."
  (should (equal (passepartout--handle-request
                  nil '_passepartout/emacs/eval
                  '(:code "(setq n (length text)) (format \"%s has %d\" text n)"
                          :bindings (:text "(delete-file \"x\")" :n 0)))
                 '(:value "(delete-file \"x\") has 17")))
  (should (equal (passepartout--handle-request
                  nil '_passepartout/emacs/eval '(:code "(+ 1 2)" :bindings nil))
                 '(:value "3")))
  (let ((err (should-error (passepartout--handle-request
                            nil '_passepartout/emacs/eval
                            '(:code "(error \"No buffer named %s\" buffer)"
                                    :bindings (:buffer "nope")))
                           :type 'jsonrpc-error)))
    (should (equal (alist-get 'jsonrpc-error-message (cdr err)) "No buffer named nope"))
    (should (equal (alist-get 'jsonrpc-error-code (cdr err)) -32603)))
  (let ((err (should-error (passepartout--handle-request nil 'session/request_permission nil)
                           :type 'jsonrpc-error)))
    (should (equal (alist-get 'jsonrpc-error-code (cdr err)) -32601))))

(ert-deftest passepartout-test-find-program-in-checkout ()
  "Without `passepartout-program' nor exec-path, the checkout's build is used."
  (let ((passepartout-program nil)
        (exec-path nil))
    (let ((found (passepartout--find-program)))
      (should (string-match-p "/target/\\(release\\|debug\\)/passepartout\\'" found)))))

(provide 'passepartout-tests)
;;; passepartout-tests.el ends here
