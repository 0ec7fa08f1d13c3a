;;; passepartout.el --- A local-first, safety-first agent beside Emacs  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The passepartout authors

;; Author: The passepartout authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: tools, convenience, processes
;; URL: https://github.com/passepartout/passepartout

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

;; passepartout is an LLM agent that runs as a daemon beside Emacs.  The
;; model proposes actions; deterministic gates verify them; risky ones
;; become Org "flight plans" that you approve or reject in Emacs.
;;
;; Entry points:
;;
;; - `passepartout': start the daemon if needed and open the Org chat
;;   buffer of the current project.  Write under "* You", send with
;;   C-c C-c, cancel with C-c C-k.
;; - `passepartout-plans': list the flight plans waiting for you.  In a
;;   plan buffer C-c C-c approves (edits included) and C-c C-k rejects;
;;   in the chat, a waiting plan has the same keys on its lines.
;; - `passepartout-chats': the saved chats (Org files); opening one
;;   resumes its session.
;; - `passepartout-menu': provider, model and settings for a session.
;; - `passepartout-new-skill': write a skill as a literate Org file,
;;   checked by the daemon as you type (`passepartout-skill-mode').
;; - `passepartout-events': the JSON-RPC messages exchanged (turns the
;;   log on when it is off, its default).
;;
;; One daemon serves the whole Emacs; each project gets its own session.
;; API keys come from auth-source (see `passepartout-auth-hosts'), reach
;; the daemon when it starts and are never shown in a buffer.

;;; Code:

(require 'cl-lib)
(require 'map)
(require 'project)
(require 'passepartout-rpc)
(require 'passepartout-fs)
(require 'passepartout-mcp)
(require 'passepartout-chat)
(require 'passepartout-plan)
(require 'passepartout-skill)
(require 'passepartout-chats)
(require 'passepartout-menu)
(require 'passepartout-history)

(defun passepartout--project-root ()
  "Return the directory a session here is rooted at."
  (expand-file-name
   (if-let ((project (project-current)))
       (project-root project)
     default-directory)))

;;;###autoload
(defun passepartout (&optional directory resume)
  "Chat with passepartout about the current project.
Start the daemon if it is not running, then show the Org chat buffer
of the project around `default-directory' (with a prefix argument, ask
for DIRECTORY).  When the project has no chat buffer but a saved chat,
offer to resume the last one (from Lisp: RESUME non-nil resumes it)."
  (interactive
   (let ((root (if current-prefix-arg
                   (expand-file-name (read-directory-name "Project directory: "))
                 (passepartout--project-root))))
     (list root (passepartout--offer-resume root))))
  (let* ((root (file-name-as-directory
                (if directory
                    (expand-file-name directory)
                  (passepartout--project-root))))
         (last (and resume (not (passepartout-chat-live-buffer root))
                    (passepartout-chat-last-file root)))
         (buffer (if last
                     (passepartout-chat-open-file last)
                   (passepartout-chat-buffer root))))
    (with-current-buffer buffer
      (passepartout-chat--ensure-session))
    (pop-to-buffer buffer)
    (when (< (point) passepartout-chat--prompt)
      (goto-char (point-max)))
    buffer))

(defun passepartout--offer-resume (root)
  "Ask whether to resume ROOT's last saved chat, when it has no chat open.
After a restart, that chat may hold a flight plan waiting for you."
  (unless (passepartout-chat-live-buffer root)
    (when-let ((file (passepartout-chat-last-file root)))
      (y-or-n-p (format "Resume the last chat of %s (%s)? "
                        (abbreviate-file-name root)
                        (let ((prompt (cadr (passepartout-chats--summary file))))
                          (if (string-empty-p prompt)
                              (file-name-nondirectory file)
                            (truncate-string-to-width prompt 40 nil nil "…"))))))))

;;;###autoload
(defun passepartout-plans ()
  "List the flight plans waiting for a decision.
Start the daemon if it is not running: it knows the plans waiting from
before."
  (interactive)
  (passepartout--ensure-connection)
  (pop-to-buffer (passepartout-plans-list)))

;;;###autoload
(defun passepartout-new-skill (name directory)
  "Create a skill called NAME in DIRECTORY from a template, and visit it.
Interactively, ask whether it belongs to you (every project) or to the
current project."
  (interactive
   (list (read-string "Skill name (lowercase, e.g. git-helpers): ")
         (passepartout-skill--read-directory)))
  (pop-to-buffer (passepartout-skill-create name directory)))

;;;###autoload
(defun passepartout-skill-mode-maybe ()
  "Turn on `passepartout-skill-mode' if this Org buffer is a skill file.
Add it to `org-mode-hook' to check skills as you edit them."
  (when (and (derived-mode-p 'org-mode)
             (passepartout-skill-file-p buffer-file-name))
    (passepartout-skill-mode 1)))

;;;###autoload
(defun passepartout-events ()
  "Show the JSON-RPC messages exchanged with the daemon; return the buffer.
When the log is off (`passepartout-events-buffer-size' 0, the default),
turn it on for the running daemon, keeping
`passepartout-events-on-demand-size' characters."
  (interactive)
  (unless passepartout--connection
    (user-error "The passepartout daemon has not been started"))
  (when (passepartout--events-on passepartout--connection
                                 passepartout-events-on-demand-size)
    (message "passepartout: logging JSON-RPC messages from now on"))
  (pop-to-buffer (jsonrpc-events-buffer passepartout--connection))
  (current-buffer))

;;;###autoload
(defun passepartout-stderr ()
  "Show what the daemon wrote to its standard error."
  (interactive)
  (pop-to-buffer (get-buffer-create passepartout--stderr-buffer-name)))

;;;###autoload
(defun passepartout-log ()
  "Show the daemon's log file (its INFO lines; stderr has only warnings).
The file is followed as it grows."
  (interactive)
  (let* ((conn (passepartout--ensure-connection))
         (file (map-nested-elt (passepartout--connection-server-info conn)
                               '(:_meta :passepartout :logFile))))
    (unless (and (stringp file) (file-readable-p file))
      (user-error "The daemon names no readable log file%s"
                  (if (stringp file) (format " (%s)" file) "")))
    (with-current-buffer (find-file-noselect file)
      (view-mode 1)
      (auto-revert-tail-mode 1)
      (goto-char (point-max))
      (pop-to-buffer (current-buffer)))))

;;;###autoload
(defun passepartout-shutdown ()
  "Stop the daemon.  Pending flight plans are kept for its next start."
  (interactive)
  (passepartout--shutdown))

;;;###autoload
(defun passepartout-restart ()
  "Stop the daemon and start it again."
  (interactive)
  (passepartout--shutdown)
  (passepartout--ensure-connection)
  (message "passepartout: restarted"))

(provide 'passepartout)
;;; passepartout.el ends here
