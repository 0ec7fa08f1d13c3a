;;; passepartout-trust-tests.el --- ERT tests for trusting project skills  -*- lexical-binding: t; -*-

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

;; `passepartout-skill-trust' against the real daemon: a project skill is
;; listed as untrusted until the person confirms, is trusted with the
;; hash of what was shown, and a file changed while it was being shown is
;; refused.  Run with tests/elisp/run.sh.

;;; Code:

(require 'ert)
(require 'passepartout-test-support)

(defconst passepartout-trust-test--skill
  "#+SKILL: deploy
#+DESCRIPTION: Deploy this project.

* deploy :tool:
:PROPERTIES:
:APPROVAL: auto
:END:
Deploy.
#+begin_src sh
echo deployed
#+end_src
"
  "A project skill whose tool claims to run unasked.")

(defun passepartout-trust-test--project-skill (project)
  "The deploy skill as PROJECT lists it: a plist, or nil."
  (let ((result (jsonrpc-request (passepartout--ensure-connection)
                                 :_passepartout/skills/list
                                 (list :cwd (expand-file-name project)))))
    (seq-find (lambda (s) (and (equal (plist-get s :name) "deploy")
                               (equal (plist-get s :origin) "project")))
              (plist-get result :skills))))

(ert-deftest passepartout-test-skill-trust ()
  "A project skill loads only after the person trusts what was shown."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name ".passepartout/skills/" project))
           (file (expand-file-name "deploy.org" dir))
           (asked nil))
      (make-directory dir t)
      (with-temp-file file (insert passepartout-trust-test--skill))
      (passepartout--ensure-connection)
      (should (eq (plist-get (passepartout-trust-test--project-skill project) :trusted)
                  :json-false))
      ;; Saying no trusts nothing.
      (cl-letf (((symbol-function 'yes-or-no-p) (lambda (&rest _) nil)))
        (should-error (passepartout-skill-trust file) :type 'user-error))
      (should (eq (plist-get (passepartout-trust-test--project-skill project) :trusted)
                  :json-false))
      ;; The file is shown, the person agrees: trusted, and loaded.
      (cl-letf (((symbol-function 'yes-or-no-p)
                 (lambda (prompt)
                   (setq asked prompt)
                   (with-current-buffer "*passepartout trust*"
                     (should (string-match-p "#\\+SKILL: deploy" (buffer-string))))
                   t)))
        (passepartout-skill-trust file))
      (should (string-match-p "deploy\\.org with exactly this content" asked))
      (should (eq (plist-get (passepartout-trust-test--project-skill project) :trusted) t))
      ;; Changed while being shown: the daemon refuses, nothing is trusted.
      (cl-letf (((symbol-function 'yes-or-no-p)
                 (lambda (_prompt)
                   (with-temp-file file
                     (insert passepartout-trust-test--skill "\n* more\n"))
                   t)))
        (let ((err (should-error (passepartout-skill-trust file) :type 'user-error)))
          (should (string-match-p "changed since it was shown" (cadr err)))))
      (should (eq (plist-get (passepartout-trust-test--project-skill project) :trusted)
                  :json-false)))))

(ert-deftest passepartout-test-skill-lock-files-are-not-skills ()
  "Editing a skill leaves an Emacs lock file beside it; reloading ignores it.
Fix (6) of the Emacs issue: `.#x.org' used to be read as a broken skill."
  (passepartout-test-with-daemon nil
    (let* ((dir (expand-file-name "passepartout/skills/" (concat home ".config/")))
           (file (expand-file-name "tidy.org" dir))
           (create-lockfiles t))
      (make-directory dir t)
      (with-temp-file file
        (insert (replace-regexp-in-string "deploy" "tidy" passepartout-trust-test--skill)))
      (with-current-buffer (find-file-noselect file)
        (unwind-protect
            (progn
              ;; A modified buffer visiting the file: Emacs takes the lock.
              (goto-char (point-max))
              (insert "\nMore prose.\n")
              (should (file-symlink-p (expand-file-name ".#tidy.org" dir)))
              (jsonrpc-request (passepartout--ensure-connection)
                               :_passepartout/skills/reload
                               (list :cwd (expand-file-name project)))
              (let* ((result (jsonrpc-request (passepartout--ensure-connection)
                                              :_passepartout/skills/list
                                              (list :cwd (expand-file-name project))))
                     (files (mapcar (lambda (d) (or (plist-get d :path) ""))
                                    (append (plist-get result :diagnostics) nil))))
                (should (seq-find (lambda (sk) (equal (plist-get sk :name) "tidy"))
                                  (plist-get result :skills)))
                (should-not (seq-find (lambda (f) (string-match-p "\\.#" f)) files))))
          (set-buffer-modified-p nil)
          (kill-buffer))))))

(provide 'passepartout-trust-tests)
;;; passepartout-trust-tests.el ends here
