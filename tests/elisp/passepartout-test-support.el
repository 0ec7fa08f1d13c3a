;;; passepartout-test-support.el --- Fixtures for the passepartout ERT suite  -*- lexical-binding: t; -*-

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

;; Fixtures that run the real daemon against the real fake provider
;; (target/debug/examples/fake_provider), in temporary HOME,
;; XDG_CONFIG_HOME, state and project directories, so a person's own
;; configuration and keys are never read.  Paths come from
;; PASSEPARTOUT_BIN and PASSEPARTOUT_FAKE_PROVIDER (see run.sh).

;;; Code:

(require 'cl-lib)
(require 'ert)
(require 'subr-x)
(require 'passepartout)

;; The tests replace minibuffer primitives (`yes-or-no-p', `y-or-n-p',
;; `read-string', `completing-read') with the person's answers.  In an
;; Emacs with native compilation, replacing a primitive first compiles a
;; "trampoline" for it, so that natively compiled callers see the
;; replacement: 5-20 s a primitive under Emacs 30 in batch, which does not
;; keep them all between runs.  The package is loaded from source here,
;; so its calls go through the symbols and need no trampoline.
(defvar native-comp-enable-subr-trampolines) ; Emacs 29 and later
(defvar comp-enable-subr-trampolines)        ; its Emacs 28 name
(setq native-comp-enable-subr-trampolines nil
      comp-enable-subr-trampolines nil)

(defvar passepartout-test--bin
  (expand-file-name (or (getenv "PASSEPARTOUT_BIN") "target/debug/passepartout"))
  "The daemon under test.")

(defvar passepartout-test--fake
  (expand-file-name (or (getenv "PASSEPARTOUT_FAKE_PROVIDER")
                        "target/debug/examples/fake_provider"))
  "The fake model server.")

(defvar passepartout-test--files-skill (expand-file-name "skills/files.org")
  "The built-in file tools, copied into a test home with `write_file' asking.")

(defun passepartout-test--person-rules (home)
  "Write into HOME the person's own settings the asking tests rely on.
Since issue 36 `write_file' runs without asking (its recorded change is
judged) and so does a recursive delete inside the project (its changeset
is judged); the tests use both as the actions a person answers, so the
test home keeps them asking, as a person may choose in their own skills."
  (let ((dir (expand-file-name ".config/passepartout/skills/" home)))
    (make-directory dir t)
    (with-temp-file (expand-file-name "files.org" dir)
      (insert-file-contents passepartout-test--files-skill)
      (goto-char (point-min))
      (search-forward ":ACTUATOR: files.write\n:APPROVAL: auto")
      (replace-match ":ACTUATOR: files.write\n:APPROVAL: ask" t t))
    (with-temp-file (expand-file-name "careful.org" dir)
      (insert "#+TITLE: Careful\n#+SKILL: careful\n"
              "#+DESCRIPTION: The person's own rules.\n#+TRIGGER: always\n\n"
              "* Rules :rules:\n** Ask before deleting recursively\n"
              ":PROPERTIES:\n:DECISION: ask\n:TARGET:   shell\n"
              ":PATTERN:  \\brm\\s+(-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\\b\n"
              ":END:\nA recursive delete can remove a lot of work in one line.\n\n"
              "- match :: =rm -rf build=\n- no match :: =rm notes.txt=\n"))))

(defvar passepartout-test--dir nil
  "Temporary directory of the running fixture.")

(defvar passepartout-test--fake-process nil
  "The fake provider process of the running fixture.")

(defmacro passepartout-test--wait-for (condition &optional timeout what)
  "Process output until CONDITION is non-nil; return its value.
Fail the test after TIMEOUT seconds (default 20), naming WHAT."
  (declare (indent 1))
  (let ((deadline (make-symbol "deadline"))
        (value (make-symbol "value")))
    `(let ((,deadline (+ (float-time) (or ,timeout 20)))
           (,value nil))
       (while (and (not (setq ,value ,condition))
                   (< (float-time) ,deadline))
         (accept-process-output nil 0.05))
       (or ,value
           (ert-fail (list "Timed out waiting" (or ,what ',condition)))))))

;;;; Scripts for the fake provider

(defun passepartout-test--chunk (delta &optional finish)
  "An OpenAI stream chunk with DELTA and FINISH reason."
  `(:choices [(:index 0 :delta ,delta
                      ,@(and finish (list :finish_reason finish)))]))

(defun passepartout-test--text-reply (&rest pieces)
  "A scripted streamed answer made of the strings PIECES."
  `(:type "open_ai" :delay_ms 5 :done t
          :chunks ,(vconcat
                    (mapcar (lambda (p) (passepartout-test--chunk (list :content p)))
                            pieces)
                    (list (append (passepartout-test--chunk (make-hash-table) "stop")
                                  '(:usage (:prompt_tokens 11 :completion_tokens 7
                                                           :total_tokens 18)))))))

(defun passepartout-test--tool-reply (id name arguments)
  "A scripted tool call ID of tool NAME with ARGUMENTS (a plist)."
  (let ((args (json-serialize arguments)))
    `(:type "open_ai" :delay_ms 5 :done t
            :chunks [,(passepartout-test--chunk
                       `(:tool_calls [(:index 0 :id ,id :type "function"
                                              :function (:name ,name :arguments ""))]))
                     ,(passepartout-test--chunk
                       `(:tool_calls [(:index 0 :function
                                              (:arguments ,(substring args 0 5)))]))
                     ,(passepartout-test--chunk
                       `(:tool_calls [(:index 0 :function
                                              (:arguments ,(substring args 5)))]))
                     ,(passepartout-test--chunk (make-hash-table) "tool_calls")])))

(defun passepartout-test--hang-reply ()
  "A scripted reply that never comes."
  '(:type "hang"))

;;;; The fixture

(defun passepartout-test--check-executables ()
  "Fail with a clear message when the programs under test are missing."
  (dolist (p (list passepartout-test--bin passepartout-test--fake))
    (unless (file-executable-p p)
      (ert-fail (format "missing %s: run `cargo build --bins --examples' first" p)))))

(defun passepartout-test--start-fake (script dir)
  "Start the fake provider on SCRIPT in DIR; return its URL.
SCRIPT is a list of replies, or the name of a file holding their JSON
array (the benchmark writes a big one without keeping it in memory)."
  (let ((file (expand-file-name "script.json" dir))
        (output (generate-new-buffer " *fake provider*")))
    (if (stringp script)
        (copy-file script file t)
      (with-temp-file file (insert (json-serialize (vconcat script)))))
    (setq passepartout-test--fake-process
          (make-process :name "fake-provider"
                        :command (list passepartout-test--fake file
                                       "--log" (expand-file-name "requests.jsonl" dir))
                        :buffer output
                        :connection-type 'pipe
                        :noquery t
                        :stderr (get-buffer-create " *fake provider stderr*")))
    (passepartout-test--wait-for
        (with-current-buffer output
          (goto-char (point-min))
          (and (re-search-forward "^\\(http://[^\n]+\\)\n" nil t)
               (match-string 1)))
      20 "the fake provider's URL")))

(defun passepartout-test--requests ()
  "The requests the fake provider received, as a list of plists."
  (let ((file (expand-file-name "requests.jsonl" passepartout-test--dir)))
    (when (file-exists-p file)
      (with-temp-buffer
        (insert-file-contents file)
        ;; Only whole lines: the fake provider may be writing the last one.
        (cl-loop while (re-search-forward "^\\(.+\\)\n" nil t)
                 collect (json-parse-string (match-string 1) :object-type 'plist
                                            :null-object nil :false-object :json-false))))))

(defun passepartout-test--cleanup ()
  "Stop everything a fixture started and forget its state."
  (ignore-errors (passepartout--shutdown))
  (setq passepartout--connection nil)
  (when (process-live-p passepartout-test--fake-process)
    (delete-process passepartout-test--fake-process))
  (dolist (b (passepartout-test--chat-buffers))
    (with-current-buffer b (set-buffer-modified-p nil))
    (let ((kill-buffer-hook nil)) (kill-buffer b)))
  (dolist (table (list passepartout-chat--buffers passepartout-chat--sessions
                       passepartout-chat--plan-chats))
    (clrhash table))
  (maphash (lambda (_k e) (let ((b (plist-get e :buffer)))
                            (when (buffer-live-p b) (kill-buffer b))))
           passepartout-plan--plans)
  (clrhash passepartout-plan--plans)
  (dolist (name '(" *fake provider*" " *fake provider stderr*"
                  "*passepartout events*" "*passepartout plans*" "*passepartout chats*"))
    (when (get-buffer name) (kill-buffer name)))
  (when passepartout-test--dir
    (delete-directory passepartout-test--dir t)
    (setq passepartout-test--dir nil)))

(defun passepartout-test--restart-emacs ()
  "Forget everything Emacs knew of passepartout, as a restart of Emacs would.
A daemon still running is stopped, as Emacs exiting closes its input
\(to leave its plans pending, kill it first).  Chat buffers are killed
the way `kill-emacs' leaves them (saved to their files); plan buffers,
tables and the connection go."
  (let ((inhibit-message t)) (passepartout--shutdown))
  (dolist (b (buffer-list))
    (when (eq (buffer-local-value 'major-mode b) 'passepartout-chat-mode)
      (with-current-buffer b (passepartout-chat-save))
      (let ((kill-buffer-hook nil)) (kill-buffer b))))
  (maphash (lambda (_k e) (let ((b (plist-get e :buffer)))
                            (when (buffer-live-p b) (kill-buffer b))))
           passepartout-plan--plans)
  (dolist (table (list passepartout-plan--plans passepartout-chat--buffers
                       passepartout-chat--sessions passepartout-chat--plan-chats))
    (clrhash table))
  (setq passepartout--connection nil))

(defun passepartout-test--chat-buffers ()
  "The live chat buffers."
  (cl-remove-if-not (lambda (b) (eq (buffer-local-value 'major-mode b)
                                    'passepartout-chat-mode))
                    (buffer-list)))

(defun passepartout-test--kill-daemon ()
  "Kill the daemon so that its flight plans stay pending, and wait for its end."
  (let ((inhibit-message t))
    (signal-process (process-id (passepartout--connection-process passepartout--connection))
                    'kill)
    (passepartout-test--wait-for (not (passepartout--live-connection)) 10 "the daemon's death")))

(defun passepartout-test--file-text (file)
  "The text of FILE, or \"\" when it does not exist."
  (if (file-exists-p file)
      (with-temp-buffer (insert-file-contents file) (buffer-string))
    ""))

(defmacro passepartout-test-with-daemon (script &rest body)
  "Run BODY with the daemon configured against a fake provider playing SCRIPT.
In BODY, `project' is a fresh project directory (a git repository)."
  (declare (indent 1) (debug t))
  `(progn
     (passepartout-test--check-executables)
     (let* ((passepartout-test--dir (make-temp-file "passepartout-test" t))
            (home (expand-file-name "home/" passepartout-test--dir))
            (project (expand-file-name "project/" passepartout-test--dir))
            (state (expand-file-name "state/" passepartout-test--dir))
            (process-environment
             (append (list (concat "HOME=" home)
                           (concat "XDG_CONFIG_HOME=" home ".config")
                           (concat "XDG_STATE_HOME=" home ".local/state")
                           (concat "XDG_DATA_HOME=" home ".local/share"))
                     process-environment))
            (url (passepartout-test--start-fake ,script passepartout-test--dir))
            (passepartout-program passepartout-test--bin)
            (passepartout-program-args
             (list "serve" "--provider-url" (concat url "/v1") "--model" "fake"
                   "--state-dir" state))
            (passepartout-auth-hosts nil)
            (passepartout-chat-directory (expand-file-name "chats/" passepartout-test--dir))
            (passepartout-events-buffer-size 0)
            (passepartout-plan-display 'pop)
            (auth-sources nil))
       (ignore project)
       (make-directory home t)
       (passepartout-test--person-rules home)
       (make-directory project t)
       (make-directory state t)
       (unwind-protect (progn ,@body)
         (passepartout-test--cleanup)))))

(defun passepartout-test--daemon-supports-load ()
  "Non-nil when the running daemon says it can resume sessions.
That is `agentCapabilities.loadSession' in its `initialize' answer."
  (let ((conn (passepartout--ensure-connection)))
    (eq t (plist-get (plist-get (passepartout--connection-server-info conn)
                                :agentCapabilities)
                     :loadSession))))

(defun passepartout-test--chat (project)
  "Open the chat buffer of PROJECT and return it."
  (let ((buffer (passepartout project)))
    (should (buffer-live-p buffer))
    buffer))

(defun passepartout-test--send (buffer text)
  "Type TEXT under the prompt of chat BUFFER and send it with C-c C-c."
  (with-current-buffer buffer
    (goto-char (point-max))
    (insert text)
    (org-ctrl-c-ctrl-c)))

(defun passepartout-test--idle-p (buffer)
  "Non-nil when chat BUFFER has no turn running."
  (null (buffer-local-value 'passepartout-chat--stream buffer)))

(defun passepartout-test--text (buffer)
  "BUFFER's text without properties."
  (with-current-buffer buffer
    (buffer-substring-no-properties (point-min) (point-max))))

(provide 'passepartout-test-support)
;;; passepartout-test-support.el ends here
