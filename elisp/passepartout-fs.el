;;; passepartout-fs.el --- The agent's file reads and writes through Emacs  -*- lexical-binding: t; -*-

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

;; ACP's `fs/read_text_file' and `fs/write_text_file', answered by Emacs
;; (advertised in `initialize', see `passepartout--initialize-params').
;; The agent's read of a file open in a buffer sees the buffer's text,
;; saved or not; its write of such a file replaces the buffer's text in
;; one undo step, keeping point where it can, and saves the buffer, so
;; the disk holds the text when the daemon's checkpoints look.  An
;; unmodified buffer older than its file is not read (the disk is), and
;; reverted before a write; a buffer with unsaved changes whose file also
;; changed on disk is a conflict: the write is refused, nothing is lost,
;; and nothing prompts inside the connection's process filter.
;;
;; The daemon checked the path before sending it (beneath the session's
;; directory, no symbolic link, the control surface only with a
;; person's approval) and sends the absolute path the kernel resolved.
;; Emacs still refuses a relative path, and a path whose true name
;; differs from it (a symbolic link put there since), so it never
;; follows into a file the daemon did not name.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'jsonrpc)
(require 'passepartout-rpc)

(defun passepartout-fs--checked-path (params)
  "Return the absolute path in PARAMS, or answer a JSON-RPC error.
A relative path, or one that goes through a symbolic link, is refused."
  (let ((path (plist-get params :path)))
    (unless (and (stringp path) (file-name-absolute-p path))
      (jsonrpc-error :code -32602
                     :message (format "fs: the path must be absolute, got %S" path)))
    (unless (string= (file-truename path) path)
      (jsonrpc-error :code -32602
                     :message (format "fs: %s goes through a symbolic link (to %s); refused"
                                      path (file-truename path))))
    path))

(defun passepartout-fs--lines (text line limit)
  "Return TEXT from 1-based LINE on, at most LIMIT lines (nil: all)."
  (if (not (or line limit))
      text
    (with-temp-buffer
      (insert text)
      (goto-char (point-min))
      (forward-line (1- (max 1 (or line 1))))
      (let ((start (point)))
        (if limit (forward-line limit) (goto-char (point-max)))
        (buffer-substring-no-properties start (point))))))

(defun passepartout-fs--current-buffer (path)
  "The buffer visiting PATH whose text is current, or nil.
A buffer with unsaved changes is current; an unmodified one only while
the file on disk has not changed since it was read (else the disk is
newer, and a read should see the disk)."
  (when-let ((buffer (find-buffer-visiting path)))
    (and (or (buffer-modified-p buffer)
             (verify-visited-file-modtime buffer))
         buffer)))

(cl-defmethod passepartout--handle-request
  (_conn (_method (eql 'fs/read_text_file)) params)
  "Return the text of the file in PARAMS: its buffer's if one visits it.
Honours PARAMS' `line' (1-based) and `limit' (lines)."
  (let* ((path (passepartout-fs--checked-path params))
         (buffer (passepartout-fs--current-buffer path))
         (text (cond
                (buffer
                 (with-current-buffer buffer
                   (save-restriction
                     (widen)
                     (buffer-substring-no-properties (point-min) (point-max)))))
                ((file-regular-p path)
                 (with-temp-buffer
                   (let ((coding-system-for-read 'utf-8))
                     (insert-file-contents path))
                   (buffer-string)))
                (t (jsonrpc-error :code -32002
                                  :message (format "fs: no file %s" path))))))
    (list :content (passepartout-fs--lines text
                                           (plist-get params :line)
                                           (plist-get params :limit)))))

(defun passepartout-fs--replace-buffer-text (text)
  "Make the current buffer's whole text TEXT, as one undo step.
Point and markers stay where the text around them did not change."
  (save-restriction
    (widen)
    (let ((source (generate-new-buffer " *passepartout-fs*" t)))
      (unwind-protect
          (progn
            (with-current-buffer source (insert text))
            (undo-boundary)
            ;; Large or very different texts: a plain replacement after
            ;; one second of diffing (still one undo step).
            (replace-buffer-contents source 1.0)
            (undo-boundary))
        (kill-buffer source)))))

(cl-defmethod passepartout--handle-request
  (_conn (_method (eql 'fs/write_text_file)) params)
  "Write the text in PARAMS to its file, through its buffer if one visits it.
The buffer is saved: the daemon looks at the disk after the answer."
  (let* ((path (passepartout-fs--checked-path params))
         (text (plist-get params :content))
         (buffer (find-buffer-visiting path)))
    (unless (stringp text)
      (jsonrpc-error :code -32602 :message "fs: `content' must be a string"))
    (if buffer
        (with-current-buffer buffer
          (unless (verify-visited-file-modtime buffer)
            ;; The file changed on disk since the buffer read it: never
            ;; prompt inside the connection's filter.
            (if (buffer-modified-p)
                (jsonrpc-error
                 :code -32000
                 :message (format "fs: %s has unsaved changes in Emacs and changed on disk too; save or revert it first"
                                  path))
              (revert-buffer t t t)))
          (passepartout-fs--replace-buffer-text text)
          ;; Save exactly the agent's text: no final newline added and no
          ;; hooks rewriting it, or the disk would differ from the buffer.
          (let ((require-final-newline nil)
                (before-save-hook nil)
                (save-silently t))
            (save-buffer)))
      (with-temp-buffer
        (insert text)
        (let ((coding-system-for-write 'utf-8-unix))
          (write-region nil nil path nil 'silent))))
    nil))

(provide 'passepartout-fs)
;;; passepartout-fs.el ends here
