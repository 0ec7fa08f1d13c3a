;;; passepartout-history.el --- Checkpoints: history and undo  -*- lexical-binding: t; -*-

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

;; Every action of the agent that changed the project is recorded by the
;; daemon as a checkpoint (see docs/checkpoints.md).  `passepartout-history'
;; lists the checkpoints of a project in a tabulated buffer;
;; `passepartout-undo' reverts one (the one at point, in a chat the
;; chat's own last change, else the last applied one);
;; `passepartout-undo-turn' reverts every change of one turn of the
;; agent together (the turn at point, or the last one).  The daemon
;; refuses, changing nothing, when the files changed
;; since; an undo is itself a checkpoint, so undoing it redoes the change.
;; Both ask first when run as commands, and revert the buffers visiting
;; what changed: a buffer must never keep showing the agent's version of
;; a file the undo restored.

;;; Code:

(require 'subr-x)
(require 'jsonrpc)
(require 'project)
(require 'tabulated-list)
(require 'passepartout-rpc)

(defvar passepartout-chat--session-id)
(defvar passepartout-chat--root)

(defvar-local passepartout-history--directory nil
  "The project directory whose checkpoints this buffer lists.")

(defun passepartout-history--default-directory ()
  "The project root of the current buffer, else `default-directory'."
  (directory-file-name
   (expand-file-name
    (if-let ((proj (project-current)))
        (project-root proj)
      default-directory))))

(defun passepartout-history--request (method params)
  "Send METHOD with PARAMS to the daemon and wait for the result.
A refusal from the daemon becomes a `user-error' with its reason."
  (let ((conn (passepartout--ensure-connection)))
    (condition-case err
        (jsonrpc-request conn method params :timeout 60)
      (jsonrpc-error
       (user-error "passepartout: %s" (passepartout--error-message err))))))

(defun passepartout-history--entries (directory)
  "Tabulated entries for the checkpoints of DIRECTORY."
  (let* ((result (passepartout-history--request
                  :_passepartout/history (list :cwd directory)))
         (checkpoints (append (plist-get result :checkpoints) nil)))
    (mapcar
     (lambda (cp)
       (let ((id (plist-get cp :id)))
         (list id
               (vector id
                       (plist-get cp :status)
                       (or (plist-get cp :tool) "")
                       (or (plist-get cp :createdAt) "")
                       (or (plist-get cp :turn) "-")
                       (concat (plist-get cp :summary)
                               (if-let ((u (plist-get cp :undoes)))
                                   (format " (undoes %s)" u)
                                 ""))))))
     checkpoints)))

(defun passepartout-history--refresh ()
  "Fetch the checkpoints again."
  (setq tabulated-list-entries
        (passepartout-history--entries passepartout-history--directory)))

(defvar passepartout-history-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "u") #'passepartout-undo)
    (define-key map (kbd "U") #'passepartout-undo-turn)
    map)
  "Keymap of `passepartout-history-mode'.")

(define-derived-mode passepartout-history-mode tabulated-list-mode
  "Passepartout-History"
  "The checkpoints of a project, newest first.
\\<passepartout-history-mode-map>\\[passepartout-undo] undoes the checkpoint at point; \
\\[passepartout-undo-turn] undoes the whole turn at point;
\\[revert-buffer] refreshes."
  (setq tabulated-list-format
        [("Id" 6 nil) ("Status" 9 t) ("Tool" 14 t) ("When" 25 t) ("Turn" 15 t)
          ("Effect" 0 nil)])
  (setq tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'passepartout-history--refresh nil t)
  (tabulated-list-init-header))

;;;###autoload
(defun passepartout-history (&optional directory)
  "List the checkpoints of DIRECTORY (default: this project) and return the buffer."
  (interactive)
  (let* ((dir (directory-file-name
               (expand-file-name
                (or directory (passepartout-history--default-directory)))))
         (buffer (get-buffer-create "*passepartout history*")))
    (with-current-buffer buffer
      (passepartout-history-mode)
      (setq passepartout-history--directory dir)
      (setq default-directory (file-name-as-directory dir))
      (passepartout-history--refresh)
      (tabulated-list-print))
    (when (called-interactively-p 'interactive)
      (pop-to-buffer buffer))
    buffer))

;;;; Visiting buffers

(defun passepartout-history--revert-visiting (directory)
  "Make the buffers visiting files under DIRECTORY show them as on disk.
Called after an undo changed files behind Emacs's back.  An unmodified
buffer is reverted; one with unsaved edits is reverted only if the
person says so; one whose file the undo deleted is left, and named.
Returns the list of buffers reverted."
  (let ((root (file-name-as-directory (expand-file-name directory)))
        reverted gone)
    (dolist (buffer (buffer-list))
      (let ((file (buffer-file-name buffer)))
        (when (and file (string-prefix-p root (expand-file-name file)))
          (with-current-buffer buffer
            (cond ((not (file-exists-p file))
                   (unless (verify-visited-file-modtime buffer)
                     (push (buffer-name) gone)))
                  ((verify-visited-file-modtime buffer))
                  ((or (not (buffer-modified-p))
                       (yes-or-no-p
                        (format "The undo changed %s, which has unsaved edits here; discard them and show the file? "
                                (file-relative-name file root))))
                   (revert-buffer t t t)
                   (push buffer reverted)))))))
    (when gone
      (message "passepartout: the undo deleted the file of %s"
               (string-join gone ", ")))
    reverted))

(defun passepartout-history--confirm (question)
  "Ask QUESTION (yes or no); a no is a `user-error' that changes nothing."
  (unless (yes-or-no-p question)
    (user-error "Nothing undone")))

(defun passepartout-history--chat-session ()
  "The session id of the chat buffer we are in, or nil elsewhere."
  (and (derived-mode-p 'passepartout-chat-mode)
       (bound-and-true-p passepartout-chat--session-id)))

;;;###autoload
(defun passepartout-undo (&optional id directory confirm)
  "Undo checkpoint ID of DIRECTORY.
In the history buffer, ID is the checkpoint at point.  In a chat buffer
it is the newest change of that chat's session (never one another chat
made since: the daemon refuses, naming it, when this chat has none);
elsewhere it is the last applied checkpoint of this project.  With
CONFIRM (always, interactively), ask first.  Buffers visiting the files
the undo changed are reverted (one with unsaved edits only if you say
so).  Returns the daemon's answer (a plist with :undone, :tool,
:createdAt, :checkpoint and :summary)."
  (interactive (list nil nil t))
  (let* ((in-history (derived-mode-p 'passepartout-history-mode))
         (id (or id (and in-history (tabulated-list-get-id))))
         (session (and (not id) (passepartout-history--chat-session)))
         (dir (or directory
                  (and in-history passepartout-history--directory)
                  (and session (bound-and-true-p passepartout-chat--root))
                  (passepartout-history--default-directory)))
         (params (append (list :cwd (directory-file-name (expand-file-name dir)))
                         (and id (list :id id))
                         (and session (list :sessionId session)))))
    (when confirm
      (passepartout-history--confirm
       (cond ((and in-history id (tabulated-list-get-entry))
              (format "Undo checkpoint %s (%s)? " id (aref (tabulated-list-get-entry) 5)))
             (session
              (format "Undo this chat's last change in %s? " (abbreviate-file-name dir)))
             (t (format "Undo %s in %s? " (or id "the last change")
                        (abbreviate-file-name dir))))))
    (let ((result (passepartout-history--request :_passepartout/undo params)))
      (passepartout-history--revert-visiting dir)
      (message "passepartout: undid %s (%s, %s): %s"
               (plist-get result :undone) (plist-get result :tool)
               (plist-get result :createdAt) (plist-get result :summary))
      (when in-history
        (revert-buffer))
      result)))

;;;###autoload
(defun passepartout-undo-turn (&optional turn directory confirm)
  "Undo every change of TURN in DIRECTORY, all or nothing.
In the history buffer, TURN is the turn of the checkpoint at point; in
a chat buffer it is that chat's last turn that changed the project
(never another chat's); elsewhere it is the last turn that changed this
project.  The daemon
refuses, changing nothing, when any of the turn's files changed since.
With CONFIRM (always, interactively), ask first.  Buffers visiting the
files the undo changed are reverted, as by `passepartout-undo'.
Returns the daemon's answer (a plist with :turn, :undone, :checkpoint
and :summary)."
  (interactive (list nil nil t))
  (let* ((in-history (derived-mode-p 'passepartout-history-mode))
         (at-point (and in-history (tabulated-list-get-entry)
                        (aref (tabulated-list-get-entry) 4)))
         (turn (or turn
                   (and at-point (not (equal at-point "-")) at-point)
                   "last"))
         (session (and (equal turn "last") (passepartout-history--chat-session)))
         (dir (or directory
                  (and in-history passepartout-history--directory)
                  (and session (bound-and-true-p passepartout-chat--root))
                  (passepartout-history--default-directory))))
    (when confirm
      (passepartout-history--confirm
       (format "Undo every change of turn %s in %s? " turn (abbreviate-file-name dir))))
    (let ((result (passepartout-history--request
                   :_passepartout/undo
                   (append (list :cwd (directory-file-name (expand-file-name dir))
                                 :turn turn)
                           (and session (list :sessionId session))))))
      (passepartout-history--revert-visiting dir)
      (message "passepartout: undid turn %s (%s): %s"
               (plist-get result :turn) (plist-get result :undone)
               (plist-get result :summary))
      (when in-history
        (revert-buffer))
      result)))

(provide 'passepartout-history)
;;; passepartout-history.el ends here
