;;; passepartout-readme-tests.el --- What the README and docs/emacs.md claim  -*- lexical-binding: t; -*-

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

;; The README's install block makes every command its Emacs section
;; names callable in a bare Emacs; the committed autoloads file is the
;; one the cookies make; the settings table of docs/emacs.md is the
;; package's defcustoms, with their defaults.

;;; Code:

(require 'passepartout-test-support)

(defun passepartout-readme-test--file (name)
  "The text of NAME, a file of the repository."
  (with-temp-buffer
    (insert-file-contents
     (expand-file-name (concat "../../" name)
                       (file-name-directory (locate-library "passepartout-test-support"))))
    (buffer-string)))

(defun passepartout-readme-test--emacs-section ()
  "The README's Emacs section."
  (let ((readme (passepartout-readme-test--file "README.md")))
    (string-match "^## Emacs\n\\(\\(?:.*\n\\)*?\\)## " readme)
    (match-string 1 readme)))

(defun passepartout-readme-test--commands ()
  "The commands the README's Emacs section names with M-x, as symbols."
  (let ((section (passepartout-readme-test--emacs-section))
        (start 0) commands)
    (while (string-match "M-x \\(passepartout[-a-z]*\\)" section start)
      (cl-pushnew (intern (match-string 1 section)) commands)
      (setq start (match-end 0)))
    (nreverse commands)))

(ert-deftest passepartout-readme-test-install-block-makes-commands-callable ()
  "The README's install block, in a bare Emacs, autoloads every command it names.
Then a chat starts there against the real daemon."
  (passepartout-test-with-daemon
      (list (passepartout-test--text-reply "Installed."))
    (let* ((section (passepartout-readme-test--emacs-section))
           (block (progn
                    (should (string-match "^```elisp\n\\(;; Install\\(?:.*\n\\)*?\\)```" section))
                    (match-string 1 section)))
           (snippet (replace-regexp-in-string
                     "/path/to/passepartout/elisp"
                     (directory-file-name (file-name-directory (locate-library "passepartout")))
                     block t t))
           (commands (passepartout-readme-test--commands))
           (file (expand-file-name "init.el" passepartout-test--dir))
           (out (expand-file-name "out" passepartout-test--dir)))
      ;; The table names the commands of issue 41's list, at least.
      (dolist (c '(passepartout passepartout-plans passepartout-chats passepartout-history
                                passepartout-undo passepartout-set-mode passepartout-menu
                                passepartout-new-skill passepartout-mcp-trust))
        (should (memq c commands)))
      (with-temp-file file
        (insert snippet
                (format "%S\n"
                        `(progn
                           (setq passepartout-program ,passepartout-program
                                 passepartout-program-args ',passepartout-program-args
                                 passepartout-chat-directory ,passepartout-chat-directory
                                 passepartout-auth-hosts nil)
                           (let ((found
                                  (list
                                   ;; Autoloaded: callable, nothing loaded yet.
                                   (delq nil (mapcar
                                              (lambda (c) (unless (and (commandp c)
                                                                       (autoloadp (symbol-function c)))
                                                            c))
                                              ',commands))
                                   (featurep 'passepartout)
                                   (and (memq 'passepartout-skill-mode-maybe org-mode-hook) t)
                                   (buffer-live-p (passepartout ,project))
                                   ;; Loaded now: each is a command still.
                                   (delq nil (mapcar (lambda (c) (unless (commandp c) c))
                                                     ',commands)))))
                             (with-temp-file ,out (prin1 found (current-buffer))))
                           (passepartout-shutdown)))))
      (let ((status (call-process (expand-file-name invocation-name invocation-directory)
                                  nil (get-buffer-create " *snippet*") nil
                                  "-batch" "-Q" "-l" file)))
        (should (equal (list status (with-current-buffer " *snippet*" (buffer-string)))
                       (list 0 (with-current-buffer " *snippet*" (buffer-string))))))
      (should (equal (with-temp-buffer (insert-file-contents out)
                                       (read (current-buffer)))
                     '(nil nil t t nil))))))

(defun passepartout-readme-test--autoloaded (text)
  "The symbols TEXT, an autoloads file, autoloads."
  (let ((start 0) symbols)
    (while (string-match "^(autoload '\\([^ ]+\\) " text start)
      (push (intern (match-string 1 text)) symbols)
      (setq start (match-end 0)))
    (sort symbols #'string<)))

(ert-deftest passepartout-readme-test-autoloads-file-up-to-date ()
  "elisp/passepartout-autoloads.el autoloads what the cookies of elisp/*.el say."
  (let* ((dir (file-name-directory (locate-library "passepartout")))
         (committed (passepartout-readme-test--autoloaded
                     (passepartout-readme-test--file "elisp/passepartout-autoloads.el")))
         (copy (make-temp-file "passepartout-autoloads" t))
         (generated (expand-file-name "passepartout-autoloads.el" copy)))
    (unwind-protect
        (progn
          (dolist (f (directory-files dir t "\\`passepartout.*\\.el\\'"))
            (unless (string-suffix-p "-autoloads.el" f)
              (copy-file f (file-name-as-directory copy))))
          (let ((inhibit-message t))
            (with-no-warnings
              (if (fboundp 'loaddefs-generate)
                  (loaddefs-generate copy generated)
                (make-directory-autoloads copy generated))))
          (should (equal committed
                         (passepartout-readme-test--autoloaded
                          (with-temp-buffer (insert-file-contents generated)
                                            (buffer-string)))))
          (should (memq 'passepartout-history committed)))
      (delete-directory copy t))))

(defun passepartout-readme-test--settings-table ()
  "The rows of docs/emacs.md's settings table: (VARIABLE DEFAULT-CELL)."
  (let ((doc (passepartout-readme-test--file "docs/emacs.md"))
        (start 0) rows)
    (should (string-match "^## Settings\n" doc))
    (setq start (match-end 0))
    (let ((end (if (string-match "^## " doc start) (match-beginning 0) (length doc))))
      (while (and (string-match "^| `\\(passepartout-[-a-z]+\\)` | \\([^|]*\\) |" doc start)
                  (< (match-beginning 0) end))
        (push (list (intern (match-string 1 doc)) (string-trim (match-string 2 doc))) rows)
        (setq start (match-end 0))))
    (nreverse rows)))

(ert-deftest passepartout-readme-test-settings-table-is-the-defcustoms ()
  "docs/emacs.md's settings table names every defcustom, with its default.
A default cell starts with the value, quoted in backquotes, as Lisp
reads it (a directory relative to ~ when it is one)."
  (let ((rows (passepartout-readme-test--settings-table))
        (defcustoms nil))
    (mapatoms (lambda (s)
                ;; Mode hooks (`define-minor-mode' makes them
                ;; customizable) are not settings.
                (when (and (custom-variable-p s)
                           (string-prefix-p "passepartout-" (symbol-name s))
                           (not (string-suffix-p "-hook" (symbol-name s))))
                  (push s defcustoms))))
    (should (equal (sort (mapcar #'car rows) #'string<)
                   (sort defcustoms #'string<)))
    (dolist (row rows)
      (let* ((var (car row))
             (cell (cadr row))
             (shown (progn
                      (should (string-match "\\``\\([^`]+\\)`" cell))
                      (car (read-from-string (match-string 1 cell)))))
             (default (let ((process-environment
                             (cons "XDG_DATA_HOME" process-environment))
                            (user-emacs-directory "~/.emacs.d/"))
                        (eval (car (get var 'standard-value)) t))))
        (should (equal (list var (if (stringp default) (abbreviate-file-name default) default))
                       (list var shown)))))))

;;; passepartout-readme-tests.el ends here
