;;; passepartout-mcp-tests.el --- ERT tests: trusting a project's MCP servers  -*- lexical-binding: t; -*-

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

;; `passepartout-mcp-trust' against the real daemon: the hash of the
;; bytes shown lands in the trust store; a file changed between showing
;; and trusting is refused and nothing is recorded.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)
(require 'passepartout-mcp)

(defun passepartout-mcp-test--store ()
  "The trust store's entries, as an alist of path to sha256 (or nil)."
  ;; The fixture passes --state-dir: the store lives there.
  (let ((file (expand-file-name "state/trusted-skills.json" passepartout-test--dir)))
    (when (file-exists-p file)
      (let ((json (with-temp-buffer
                    (insert-file-contents file)
                    (json-parse-buffer :object-type 'alist))))
        (mapcar (lambda (e) (cons (symbol-name (car e)) (alist-get 'sha256 (cdr e))))
                (alist-get 'skills json))))))

(ert-deftest passepartout-mcp-test-trust-records-the-shown-bytes ()
  "Trusting records the file's canonical path with the hash of what was shown."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name ".passepartout" project))
           (file (expand-file-name "config.toml" dir))
           (text "[[mcp.servers]]\nname = \"tools\"\ncommand = \"/bin/true\"\n"))
      (make-directory dir t)
      (with-temp-file file (insert text))
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (&rest _) t)))
        (let ((result (passepartout-mcp-trust project)))
          (should (equal (append (plist-get result :servers) nil) '("tools")))))
      (should (equal (passepartout-mcp-test--store)
                     (list (cons (file-truename file)
                                 (secure-hash 'sha256 text)))))
      ;; Changed between showing and trusting: refused, store unchanged.
      (cl-letf (((symbol-function 'yes-or-no-p)
                 (lambda (&rest _)
                   (with-temp-file file (insert text "# more\n"))
                   t)))
        (let ((err (should-error (passepartout-mcp-trust project) :type 'user-error)))
          (should (string-match-p "changed since it was shown" (cadr err)))))
      (should (equal (cdar (passepartout-mcp-test--store))
                     (secure-hash 'sha256 text))))))

(ert-deftest passepartout-mcp-test-a-server-state-change-is-shown ()
  "A server that stops or needs a login mid-session is named in the echo area."
  (let (shown)
    (cl-letf (((symbol-function 'message)
               (lambda (fmt &rest args) (push (apply #'format fmt args) shown))))
      (passepartout--handle-notification
       nil '_passepartout/mcp/server
       (list :sessionId "s-1"
             :server (list :name "docs" :origin "config"
                           :state "failed: needs login: run `passepartout mcp login docs`"
                           :tools []))))
    (should (equal shown
                   '("passepartout: MCP server `docs' needs login: run `passepartout mcp login docs`")))))

(provide 'passepartout-mcp-tests)
;;; passepartout-mcp-tests.el ends here
