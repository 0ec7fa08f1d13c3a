;;; passepartout-fs-tests.el --- ERT tests: the agent's reads and writes through buffers  -*- lexical-binding: t; -*-

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

;; Emacs answers ACP `fs/read_text_file' and `fs/write_text_file' (see
;; passepartout-fs.el).  Against the real daemon and fake provider: the
;; agent's read of a file open and modified in Emacs sees the unsaved
;; text; its write lands in the open buffer, is saved, and one `undo'
;; in the buffer reverts it.  The request handlers themselves refuse a
;; relative path and a path through a symbolic link.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)
(require 'passepartout-fs)

(defun passepartout-fs-test--tool-result (request id)
  "The content of tool message ID in the fake provider's REQUEST."
  (cl-loop for m across (plist-get (plist-get request :body) :messages)
           when (and (equal (plist-get m :role) "tool")
                     (equal (plist-get m :tool_call_id) id))
           return (plist-get m :content)))

(defmacro passepartout-fs-test--with-buffer (var file &rest body)
  "Bind VAR to a buffer visiting FILE around BODY; kill it after."
  (declare (indent 2))
  `(let ((,var (find-file-noselect ,file)))
     (unwind-protect (progn ,@body)
       (when (buffer-live-p ,var)
         (with-current-buffer ,var (set-buffer-modified-p nil))
         (kill-buffer ,var)))))

(ert-deftest passepartout-fs-test-read-sees-unsaved-buffer ()
  "The agent's read of a file modified in Emacs returns the unsaved text."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply "call_r" "read_file" '(:path "notes.txt"))
            (passepartout-test--text-reply "Read."))
    (let ((file (expand-file-name "notes.txt" project)))
      (with-temp-file file (insert "saved on disk\n"))
      (passepartout-fs-test--with-buffer buffer file
        (with-current-buffer buffer
          (erase-buffer)
          (insert "typed but not saved\n"))
        (let ((chat (passepartout-test--chat project)))
          (passepartout-test--send chat "Read notes.txt")
          (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
          (should (equal (passepartout-fs-test--tool-result
                          (cadr (passepartout-test--requests)) "call_r")
                         "typed but not saved\n"))
          ;; The buffer is untouched and still unsaved.
          (should (buffer-modified-p buffer))
          (with-temp-buffer
            (insert-file-contents file)
            (should (equal (buffer-string) "saved on disk\n"))))))))

(ert-deftest passepartout-fs-test-write-lands-in-buffer-saved-and-undoable ()
  "The agent's write replaces the open buffer's text, saves it; undo reverts."
  (passepartout-test-with-daemon
      (list (passepartout-test--tool-reply
             "call_w" "write_file"
             '(:path "poem.txt" :content "one\n2\nthree\n"))
            (passepartout-test--text-reply "Written."))
    (let ((file (expand-file-name "poem.txt" project)))
      (with-temp-file file (insert "one\ntwo\nthree\n"))
      (passepartout-fs-test--with-buffer buffer file
        (with-current-buffer buffer
          ;; Point on "three", after the changed line.
          (goto-char (point-min))
          (forward-line 2))
        (let* ((chat (passepartout-test--chat project))
               (plan-id (progn
                          (passepartout-test--send chat "Fix the poem")
                          (passepartout-test--wait-for
                              (car (hash-table-keys passepartout-plan--plans))
                            30 "a flight plan"))))
          (with-current-buffer (passepartout-plan-buffer plan-id)
            (passepartout-plan-approve))
          (passepartout-test--wait-for (passepartout-test--idle-p chat) 30)
          (should (string-match-p
                   "through the editor"
                   (passepartout-fs-test--tool-result
                    (cadr (passepartout-test--requests)) "call_w")))
          (with-current-buffer buffer
            (should (equal (buffer-string) "one\n2\nthree\n"))
            (should-not (buffer-modified-p))
            ;; Point stayed on "three".
            (should (looking-at "three")))
          (with-temp-buffer
            (insert-file-contents file)
            (should (equal (buffer-string) "one\n2\nthree\n")))
          ;; One undo step reverts the whole write.
          (with-current-buffer buffer
            (let ((last-command nil))
              (undo))
            (should (equal (buffer-string) "one\ntwo\nthree\n"))))))))

(ert-deftest passepartout-fs-test-handlers-refuse-relative-and-linked-paths ()
  "A relative path, or one through a symbolic link, is a JSON-RPC error."
  (let* ((dir (file-name-as-directory (file-truename (make-temp-file "passepartout-fs" t))))
         (outside (file-name-as-directory (file-truename (make-temp-file "passepartout-out" t)))))
    (unwind-protect
        (progn
          (with-temp-file (expand-file-name "secret" outside) (insert "s"))
          (make-symbolic-link (directory-file-name outside) (expand-file-name "up" dir))
          (should (equal (plist-get (passepartout--handle-request
                                     nil 'fs/read_text_file
                                     (list :path (expand-file-name "secret" outside)))
                                    :content)
                         "s"))
          (dolist (method '(fs/read_text_file fs/write_text_file))
            (dolist (path (list "secret" (expand-file-name "up/secret" dir)))
              (let ((err (should-error (passepartout--handle-request
                                        nil method (list :path path :content "x"))
                                       :type 'jsonrpc-error)))
                (should (equal (alist-get 'jsonrpc-error-code (cdr err)) -32602)))))
          (with-temp-buffer
            (insert-file-contents (expand-file-name "secret" outside))
            (should (equal (buffer-string) "s"))))
      (delete-directory dir t)
      (delete-directory outside t))))

(ert-deftest passepartout-fs-test-stale-buffers-and-conflicts ()
  "An unmodified buffer older than its file is not read; a conflict is refused."
  (let* ((dir (file-name-as-directory (file-truename (make-temp-file "passepartout-fs" t))))
         (file (expand-file-name "f.txt" dir)))
    (unwind-protect
        (progn
          (with-temp-file file (insert "old\n"))
          (passepartout-fs-test--with-buffer buffer file
            ;; Changed on disk behind the buffer's back.
            (with-temp-file file (insert "new on disk\n"))
            (set-file-times file (time-add nil 10))
            (should (equal (plist-get (passepartout--handle-request
                                       nil 'fs/read_text_file (list :path file))
                                      :content)
                           "new on disk\n"))
            ;; Unsaved edits, then the file changes on disk: the edits are
            ;; what a read sees, and a write is refused, losing nothing.
            (with-current-buffer buffer
              (revert-buffer t t t)
              (goto-char (point-min))
              (insert "mine "))
            (with-temp-file file (insert "newer\n"))
            (set-file-times file (time-add nil 20))
            (should (equal (plist-get (passepartout--handle-request
                                       nil 'fs/read_text_file (list :path file))
                                      :content)
                           "mine new on disk\n"))
            (should-error (passepartout--handle-request
                           nil 'fs/write_text_file (list :path file :content "agent\n"))
                          :type 'jsonrpc-error)
            (with-current-buffer buffer
              (should (equal (buffer-string) "mine new on disk\n")))
            (with-temp-buffer
              (insert-file-contents file)
              (should (equal (buffer-string) "newer\n")))
            ;; Unmodified but stale: reverted, then written and saved.
            (with-current-buffer buffer (set-buffer-modified-p nil))
            (passepartout--handle-request
             nil 'fs/write_text_file (list :path file :content "agent\n"))
            (with-current-buffer buffer
              (should (equal (buffer-string) "agent\n"))
              (should-not (buffer-modified-p)))
            (with-temp-buffer
              (insert-file-contents file)
              (should (equal (buffer-string) "agent\n")))))
      (delete-directory dir t))))

(ert-deftest passepartout-fs-test-read-honours-line-and-limit ()
  "`line' (1-based) and `limit' select lines of the text."
  (should (equal (passepartout-fs--lines "a\nb\nc\nd\n" 2 2) "b\nc\n"))
  (should (equal (passepartout-fs--lines "a\nb\n" nil nil) "a\nb\n"))
  (should (equal (passepartout-fs--lines "a\nb\nc" 3 nil) "c")))

(provide 'passepartout-fs-tests)
;;; passepartout-fs-tests.el ends here
