;;; passepartout-skill.el --- Authoring passepartout skills in Org  -*- lexical-binding: t; -*-

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

;; Skills are literate Org files (docs/skills.md) in the person's skill
;; directory ($XDG_CONFIG_HOME/passepartout/skills/) or a project's
;; .passepartout/skills/.  `passepartout-skill-mode' checks the buffer
;; as it is typed, through the daemon (`_passepartout/skills/check', a
;; flymake backend), and asks the daemon to reload skills on save.
;;
;; A project's skills load only after the person trusts their exact
;; content: `passepartout-skill-trust' shows the file, asks, and sends
;; the hash of what was shown (`_passepartout/skills/trust'); any later
;; change makes the file untrusted again.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'org)
(require 'flymake)
(require 'project)
(require 'passepartout-rpc)
(require 'passepartout-trust)

(defconst passepartout-skill--template
  "#+TITLE: %s
#+SKILL: %s
#+DESCRIPTION: One line saying what this skill gives the agent.
#+TRIGGER: always

Prose for people: what this skill is for, and why its tools are safe.
The daemon reads the tagged headings below; everything else is yours.

* How to use %s                                                    :prompt:
Tell the model when to use the tools of this skill, and how.

* %s_hello                                                           :tool:
:PROPERTIES:
:APPROVAL: ask
:KIND:     execute
:END:
Greet someone by name (this paragraph is the tool's description).

| name | type   | required | description    |
|------+--------+----------+----------------|
| who  | string | yes      | Whom to greet. |

#+begin_src bash
echo \"Hello, $ARG_WHO\"
#+end_src
"
  "Template of a new skill; every %s is the skill's name.")

(defun passepartout-skill-user-directory ()
  "Return the person's skill directory, honouring XDG_CONFIG_HOME."
  (expand-file-name "passepartout/skills/"
                    (or (getenv "XDG_CONFIG_HOME") "~/.config")))

(defun passepartout-skill-project-directory (&optional dir)
  "Return the skill directory of the project around DIR, or nil."
  (when-let ((project (project-current nil (or dir default-directory))))
    (expand-file-name ".passepartout/skills/" (project-root project))))

(defun passepartout-skill-file-p (file)
  "Return non-nil if FILE is an Org file in a skill directory."
  (and file
       (string-suffix-p ".org" file)
       (let ((dir (file-name-directory (expand-file-name file))))
         (or (file-equal-p dir (passepartout-skill-user-directory))
             (string-suffix-p "/.passepartout/skills/" dir)))))

;;;; Flymake

(defvar-local passepartout-skill--check-tick 0
  "Number of the newest check; answers to older ones are dropped.")

(defun passepartout-skill--severity (severity)
  "Return the flymake type for the daemon's SEVERITY string."
  (pcase severity
    ("error" :error)
    ("warning" :warning)
    (_ :note)))

(defun passepartout-skill--diagnostics (buffer path diagnostics)
  "Return flymake diagnostics for BUFFER from the daemon's DIAGNOSTICS.
Only those about PATH (or about no path) are kept."
  (cl-loop
   for d across diagnostics
   for file = (plist-get d :path)
   when (or (null file) (file-equal-p file path))
   collect (let ((region (flymake-diag-region buffer
                                              (or (plist-get d :line) 1)
                                              (plist-get d :column))))
             (flymake-make-diagnostic
              buffer (car region) (cdr region)
              (passepartout-skill--severity (plist-get d :severity))
              (plist-get d :message)))))

(defun passepartout-skill-flymake (report-fn &rest _args)
  "Flymake backend: have the daemon check this skill buffer.
REPORT-FN is flymake's callback.  The daemon is started if needed."
  (let ((conn (condition-case err (passepartout--ensure-connection)
                (error (funcall report-fn :panic
                                :explanation (error-message-string err))
                       nil))))
    (when conn
      (let* ((buffer (current-buffer))
             (path (expand-file-name (or buffer-file-name (buffer-name))))
             (tick (cl-incf passepartout-skill--check-tick)))
        (jsonrpc-async-request
         conn :_passepartout/skills/check
         (list :path path
               :text (save-restriction
                       (widen)
                       (buffer-substring-no-properties (point-min) (point-max))))
         :timeout 30
         :success-fn
         (lambda (result)
           (when (and (buffer-live-p buffer)
                      (= tick (buffer-local-value 'passepartout-skill--check-tick
                                                  buffer)))
             (funcall report-fn
                      (passepartout-skill--diagnostics
                       buffer path (plist-get result :diagnostics)))))
         :error-fn
         (lambda (error)
           (funcall report-fn :panic
                    :explanation (passepartout--error-message error)))
         :timeout-fn
         (lambda ()
           (funcall report-fn :panic :explanation "the daemon did not answer")))))))

;;;; Reload on save

(defun passepartout-skill-reload ()
  "Ask the daemon to read every skill directory again."
  (interactive)
  (passepartout--request-async
   :_passepartout/skills/reload nil
   :timeout 30
   :success-fn
   (lambda (result)
     (let* ((diagnostics (append (plist-get result :diagnostics) nil))
            (problems (length diagnostics))
            (untrusted (cl-count-if
                        (lambda (d) (string-match-p "is untrusted and was not loaded"
                                                    (or (plist-get d :message) "")))
                        diagnostics)))
       (message "passepartout: skills reloaded (%s)%s%s"
                (mapconcat #'identity (plist-get result :skills) ", ")
                (if (> problems 0) (format "; %d problem(s)" problems) "")
                (if (> untrusted 0)
                    (format "; %d untrusted project skill(s) not loaded: M-x passepartout-skill-trust"
                            untrusted)
                  ""))))
   :error-fn
   (lambda (error)
     (message "passepartout: reloading skills failed: %s"
              (passepartout--error-message error)))))

(defun passepartout-skill--after-save ()
  "Reload skills after this skill file was saved, if the daemon is running."
  (when (passepartout--live-connection)
    (passepartout-skill-reload)))

;;;; Trust

(defun passepartout-skill--project-root (file)
  "Return the project directory of FILE in its .passepartout/skills/, or nil."
  (let ((dir (file-name-directory (expand-file-name file))))
    (when (string-suffix-p "/.passepartout/skills/" dir)
      (file-name-directory
       (directory-file-name
        (file-name-directory (directory-file-name dir)))))))

(defun passepartout-skill--read-project-file ()
  "Return the project skill file to trust: this buffer's, or one asked for."
  (if (and buffer-file-name (passepartout-skill--project-root buffer-file-name))
      buffer-file-name
    (let ((dir (or (passepartout-skill-project-directory)
                   (user-error "Not in a project with .passepartout/skills/"))))
      (read-file-name "Trust project skill: " dir nil t))))

;;;###autoload (autoload 'passepartout-skill-trust "passepartout" nil t)
(defun passepartout-skill-trust (file)
  "Trust the project skill FILE with exactly its current content.
Show the file, ask for confirmation, then tell the daemon the SHA-256
of the bytes shown; the daemon refuses if the file changed meanwhile.
Any later change to FILE makes it untrusted again."
  (interactive (list (passepartout-skill--read-project-file)))
  (let* ((file (expand-file-name file))
         (root (or (passepartout-skill--project-root file)
                   (user-error "%s is not in a project's .passepartout/skills/"
                               (abbreviate-file-name file))))
         (sha256 nil))
    (setq sha256 (passepartout-trust-confirm
                  file (format "Trust %s with exactly this content (its tools, prompts and rules load)? "
                               (abbreviate-file-name file))))
    (let* ((expected (make-hash-table :test 'equal))
           (_ (puthash file sha256 expected))
           (result (jsonrpc-request (passepartout--ensure-connection)
                                    :_passepartout/skills/trust
                                    (list :cwd root
                                          :paths (vector file)
                                          :expectedSha256 expected)))
           (refused (append (plist-get result :refused) nil)))
      (when refused
        (user-error "Not trusted: %s" (plist-get (car refused) :reason)))
      (let ((trusted (aref (plist-get result :trusted) 0)))
        (message "passepartout: trusted %s (sha256 %s)"
                 (abbreviate-file-name file)
                 (substring (plist-get trusted :sha256) 0 12)))
      result)))

;;;; Mode

(define-minor-mode passepartout-skill-mode
  "Minor mode for editing a passepartout skill file.
The daemon checks the buffer as you type (through flymake) and reloads
skills when you save."
  :lighter " Skill"
  (cond
   (passepartout-skill-mode
    (passepartout--quiet-src-blocks)
    (add-hook 'flymake-diagnostic-functions #'passepartout-skill-flymake nil t)
    (add-hook 'after-save-hook #'passepartout-skill--after-save nil t)
    (flymake-mode 1))
   (t
    (remove-hook 'flymake-diagnostic-functions #'passepartout-skill-flymake t)
    (remove-hook 'after-save-hook #'passepartout-skill--after-save t))))

;;;; New skills

(defun passepartout-skill--read-directory ()
  "Ask where a new skill should live: the person's directory or the project's."
  (let ((user (passepartout-skill-user-directory))
        (project (passepartout-skill-project-directory)))
    (if (not project)
        user
      (pcase (car (read-multiple-choice
                   "Where should the skill live? "
                   `((?u "user" ,(format "for every project (%s)"
                                         (abbreviate-file-name user)))
                     (?p "project" ,(format "for this project (%s)"
                                            (abbreviate-file-name project))))))
        (?p project)
        (_ user)))))

(defun passepartout-skill-create (name directory)
  "Create skill NAME from the template in DIRECTORY.
Visit the new file and return its buffer."
  (unless (string-match-p "\\`[a-z][a-z0-9_-]*\\'" name)
    (user-error "A skill name is lowercase letters, digits, `-' and `_': %s" name))
  (let ((file (expand-file-name (concat name ".org") directory)))
    (when (file-exists-p file)
      (user-error "%s exists already" (abbreviate-file-name file)))
    (make-directory directory t)
    (let ((buffer (find-file-noselect file))
          (tool-prefix (replace-regexp-in-string "-" "_" name)))
      (with-current-buffer buffer
        (insert (format passepartout-skill--template name name name tool-prefix))
        (save-buffer)
        (unless (derived-mode-p 'org-mode) (org-mode))
        (passepartout-skill-mode 1))
      buffer)))

(provide 'passepartout-skill)
;;; passepartout-skill.el ends here
