;;; passepartout-trust.el --- Trusting a file with exactly the content shown  -*- lexical-binding: t; -*-

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

;; A project's skills and its MCP servers run only after the person
;; trusts the exact bytes of their file.  Both go through the one
;; confirmation here: show the file, ask, and return the SHA-256 of the
;; bytes that were shown, which the daemon checks against the file as it
;; is when it records the trust (a change in between is refused).

;;; Code:

(defconst passepartout-trust--buffer-name "*passepartout trust*"
  "The buffer showing a file the person is asked to trust.")

(defun passepartout-trust-confirm (file question)
  "Show FILE, ask QUESTION, and return the SHA-256 of the bytes shown.
The hash is of the file's bytes as read for display, so what the daemon
records is what the person saw.  Signal a `user-error' when the answer
is no."
  (let ((shown (get-buffer-create passepartout-trust--buffer-name))
        sha256)
    (with-current-buffer shown
      (let ((inhibit-read-only t))
        (erase-buffer)
        (set-buffer-multibyte nil)
        (insert-file-contents-literally file)
        (setq sha256 (secure-hash 'sha256 (current-buffer)))
        (set-buffer-multibyte t)
        (decode-coding-region (point-min) (point-max) 'utf-8)
        (goto-char (point-min))
        (setq buffer-read-only t)))
    (display-buffer shown)
    (unless (yes-or-no-p question)
      (user-error "Nothing trusted"))
    sha256))

(provide 'passepartout-trust)
;;; passepartout-trust.el ends here
