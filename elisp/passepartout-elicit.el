;;; passepartout-elicit.el --- MCP servers' questions, asked in the minibuffer  -*- lexical-binding: t; -*-

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

;; An MCP server may ask the person something in the middle of a tool
;; call (MCP elicitation).  The daemon sends it to Emacs as ACP
;; `elicitation/create' (Emacs advertises `elicitation' in `initialize',
;; see passepartout-rpc.el).  The question is shown in the buffer
;; `*passepartout question*' — the server's message, which the daemon
;; marks as the server's words — and then:
;;
;; - a form is asked one field at a time in the minibuffer: text with
;;   `read-string', a choice with `completing-read', several choices with
;;   `completing-read-multiple', a number with `read-string' (asked again
;;   until it is one), yes/no with `y-or-n-p'.  An empty answer leaves an
;;   optional field out.
;; - a URL is shown, never opened: the person opens it themselves.
;;
;; The first question, "Answer?", declines on `n'.  C-g at any point
;; cancels.  The daemon checks the answers against the form again and
;; asks once more when they do not fit.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'jsonrpc)
(require 'passepartout-rpc)

(defconst passepartout-elicit--buffer "*passepartout question*"
  "The buffer that shows an MCP server's question.")

(defun passepartout-elicit--show (message &optional url fields)
  "Show MESSAGE, with URL and the FIELDS' names when given."
  (with-current-buffer (get-buffer-create passepartout-elicit--buffer)
    (let ((inhibit-read-only t))
      (erase-buffer)
      (insert message "\n")
      (when url
        (insert "\nThe server asks you to open this page yourself"
                " (Emacs does not open it):\n  " url "\n"))
      (when fields
        (insert "\nFields: " (string-join fields ", ") "\n"))
      (goto-char (point-min))
      (special-mode))
    (display-buffer (current-buffer))))

(defun passepartout-elicit--choices (field)
  "The values FIELD allows: its `enum', or the `const's of its `oneOf'/`anyOf'."
  (or (append (plist-get field :enum) nil)
      (cl-loop for option across (or (plist-get field :oneOf)
                                     (plist-get field :anyOf)
                                     [])
               collect (plist-get option :const))))

(defun passepartout-elicit--prompt (name field required)
  "The minibuffer prompt for field NAME described by FIELD.
REQUIRED says whether an answer is needed."
  (let ((title (or (plist-get field :title) name))
        (description (plist-get field :description)))
    (format "%s%s%s: " title
            (if description (format " (%s)" description) "")
            (if required "" " [optional, empty to leave out]"))))

(defun passepartout-elicit--read-number (prompt field required)
  "Read a number with PROMPT for FIELD until it fits; nil when left out.
REQUIRED says whether an empty answer is refused."
  (let ((integer (equal (plist-get field :type) "integer"))
        (default (plist-get field :default))
        value)
    (while (eq value nil)
      (let ((text (string-trim (read-string prompt nil nil
                                            (and default (number-to-string default))))))
        (cond
         ((and (string-empty-p text) (not required)) (setq value 'skip))
         ((not (string-match-p "\\`-?[0-9]+\\(\\.[0-9]+\\)?\\'" text))
          (message "Not a number: %s" text) (sit-for 1))
         ((and integer (string-match-p "\\." text))
          (message "A whole number, please") (sit-for 1))
         (t (setq value (string-to-number text))))))
    (unless (eq value 'skip) value)))

(defun passepartout-elicit--read-field (name field required)
  "Ask for field NAME (a string) described by FIELD; its value, or `skip'.
REQUIRED says whether it may be left out."
  (let ((prompt (passepartout-elicit--prompt name field required))
        (choices (passepartout-elicit--choices field))
        (default (plist-get field :default)))
    (pcase (plist-get field :type)
      ("boolean" (if (y-or-n-p prompt) t :json-false))
      ((or "number" "integer")
       (or (passepartout-elicit--read-number prompt field required) 'skip))
      ("array"
       (let ((items (passepartout-elicit--choices (plist-get field :items))))
         (vconcat (completing-read-multiple prompt items nil t))))
      (_
       (let ((text (if choices
                       (completing-read prompt choices nil t nil nil default)
                     (read-string prompt nil nil default))))
         (while (and required (string-empty-p text))
           (setq text (if choices
                          (completing-read prompt choices nil t)
                        (read-string (concat "(needed) " prompt)))))
         (if (string-empty-p text) 'skip text))))))

(defun passepartout-elicit--form (message schema)
  "Ask the form SCHEMA after showing MESSAGE; the ACP answer."
  (let* ((properties (plist-get schema :properties))
         (required (mapcar (lambda (n) (if (symbolp n) (substring (symbol-name n) 1) n))
                           (append (plist-get schema :required) nil)))
         (names (cl-loop for (key _) on properties by #'cddr
                         collect (substring (symbol-name key) 1))))
    (passepartout-elicit--show message nil names)
    (if (not (y-or-n-p "An MCP server asks you (see *passepartout question*).  Answer? "))
        (list :action "decline")
      (let (content)
        (cl-loop for (key field) on properties by #'cddr
                 for name = (substring (symbol-name key) 1)
                 for value = (passepartout-elicit--read-field
                              name field (member name required))
                 unless (eq value 'skip)
                 do (setq content (append content (list key value))))
        (list :action "accept" :content (or content (make-hash-table)))))))

(defun passepartout-elicit--url (message url)
  "Show MESSAGE and URL (never opened); the ACP answer."
  (passepartout-elicit--show message url)
  (if (y-or-n-p "Open the page yourself; go ahead with it? ")
      (list :action "accept")
    (list :action "decline")))

(defun passepartout-elicit-answer (params)
  "The person's answer to the `elicitation/create' PARAMS.
Declined on `n', cancelled on \\[keyboard-quit]."
  (unwind-protect
      (condition-case nil
          (pcase (plist-get params :mode)
            ("form" (passepartout-elicit--form (plist-get params :message)
                                               (plist-get params :requestedSchema)))
            ("url" (passepartout-elicit--url (plist-get params :message)
                                             (plist-get params :url)))
            (_ (list :action "decline")))
        (quit (list :action "cancel")))
    (when-let ((buffer (get-buffer passepartout-elicit--buffer)))
      (quit-windows-on buffer)
      (kill-buffer buffer))))

(cl-defmethod passepartout--handle-request
  (_conn (_method (eql 'elicitation/create)) params)
  "Ask the person the MCP server's question in PARAMS; return the answer."
  (passepartout-elicit-answer params))

(provide 'passepartout-elicit)
;;; passepartout-elicit.el ends here
