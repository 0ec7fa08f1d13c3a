;;; passepartout-chats.el --- The list of saved passepartout chats  -*- lexical-binding: t; -*-

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

;; `passepartout-chats' lists the chat files in
;; `passepartout-chat-directory', newest first, with their project and
;; first prompt.  RET opens one in a chat buffer and resumes its
;; session when the daemon can.  Only the top of each file is read.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'tabulated-list)
(require 'passepartout-chat)

(defun passepartout-chats--summary (file)
  "Return (PROJECT FIRST-PROMPT) read from the top of chat FILE."
  (with-temp-buffer
    (insert-file-contents file nil 0 passepartout-chat--header-bytes)
    (let ((project (passepartout-chat--get-property "PASSEPARTOUT_CWD"))
          (prompt (progn
                    (goto-char (point-min))
                    ;; The first prompt's first line with text: a prompt
                    ;; may begin with blank lines.
                    (when (and (re-search-forward "^\\* You\n" nil t)
                               (re-search-forward "^[ \t]*\\([^ \t\n].*\\)$" nil t)
                               (not (string-prefix-p "* " (match-string 0))))
                      (match-string-no-properties 1)))))
      (list (abbreviate-file-name (or project "?"))
            (or prompt "")))))

(defun passepartout-chats--entries ()
  "Return the table rows: one per chat file, newest first."
  (let ((dir passepartout-chat-directory))
    (when (and dir (file-directory-p dir))
      (cl-loop for (file . attrs) in (directory-files-and-attributes
                                       dir t "\\`[^.#].*\\.org\\'" t)
               for modified = (file-attribute-modification-time attrs)
               for (project prompt) = (passepartout-chats--summary file)
               collect (list file
                             (vector (format-time-string "%F %R" modified)
                                     project
                                     (replace-regexp-in-string "[\n\t]" " " prompt)))))))

(defvar passepartout-chats-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'passepartout-chats-open)
    map)
  "Keymap for `passepartout-chats-mode'.")

(define-derived-mode passepartout-chats-mode tabulated-list-mode "Chats"
  "Major mode listing saved passepartout chats.
\\<passepartout-chats-mode-map>\\[passepartout-chats-open] opens the chat at point and resumes its session.

\\{passepartout-chats-mode-map}"
  (setq tabulated-list-format
        [("Modified" 17 t) ("Project" 30 t) ("First prompt" 0 nil)])
  (setq tabulated-list-sort-key '("Modified" . t))
  (add-hook 'tabulated-list-revert-hook
            (lambda () (setq tabulated-list-entries (passepartout-chats--entries)))
            nil t)
  (tabulated-list-init-header))

(defun passepartout-chats-list ()
  "Return the buffer listing the saved chats, filled."
  (with-current-buffer (get-buffer-create "*passepartout chats*")
    (passepartout-chats-mode)
    (setq tabulated-list-entries (passepartout-chats--entries))
    (tabulated-list-print)
    (current-buffer)))

(defun passepartout-chats-open ()
  "Open the chat on this line, resuming its session."
  (interactive)
  (let* ((file (or (tabulated-list-get-id) (user-error "No chat on this line")))
         (buffer (passepartout-chat-open-file file)))
    (with-current-buffer buffer
      (passepartout-chat--ensure-session))
    (pop-to-buffer buffer)))

;;;###autoload
(defun passepartout-chats ()
  "List the saved chats; RET opens one and resumes its session."
  (interactive)
  (pop-to-buffer (passepartout-chats-list)))

(provide 'passepartout-chats)
;;; passepartout-chats.el ends here
