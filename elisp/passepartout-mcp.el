;;; passepartout-mcp.el --- Trusting a project's MCP servers  -*- lexical-binding: t; -*-

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

;; A project may name MCP servers in `.passepartout/config.toml'
;; (`[[mcp.servers]]').  They run programs as you, so they start only
;; after you trust that file's exact content, in the same trust store as
;; project skills.  `passepartout-mcp-trust' shows the file, asks, and
;; sends the SHA-256 of the bytes shown (`_passepartout/mcp/trust'); the
;; daemon refuses if the file changed meanwhile, and any later change
;; makes it untrusted again.  The shell equivalent is
;; `passepartout mcp trust PATH'.
;;
;; A running server's questions for the person (MCP elicitation) are
;; asked by passepartout-elicit.el.

;;; Code:

(require 'project)
(require 'jsonrpc)
(require 'passepartout-rpc)
(require 'passepartout-trust)
;; MCP servers' questions for the person (elicitation).
(require 'passepartout-elicit)

(defconst passepartout-mcp--project-config ".passepartout/config.toml"
  "The project file naming MCP servers, relative to the project root.")

(defun passepartout-mcp--default-root ()
  "The current project's root, else `default-directory'."
  (if-let ((project (project-current)))
      (project-root project)
    default-directory))

;;;###autoload (autoload 'passepartout-mcp-trust "passepartout" nil t)
(defun passepartout-mcp-trust (root)
  "Trust the MCP servers of project ROOT's .passepartout/config.toml.
Show the file, ask for confirmation, then tell the daemon the SHA-256
of the bytes shown; the daemon refuses if the file changed meanwhile."
  (interactive (list (read-directory-name "Project: " (passepartout-mcp--default-root))))
  (let* ((root (directory-file-name (expand-file-name root)))
         (file (expand-file-name passepartout-mcp--project-config root))
         (sha256 nil))
    (unless (file-regular-p file)
      (user-error "No %s in %s" passepartout-mcp--project-config
                  (abbreviate-file-name root)))
    (setq sha256 (passepartout-trust-confirm
                  file (format "Trust %s with exactly this content (its MCP servers run as you)? "
                               (abbreviate-file-name file))))
    (let ((result (condition-case err
                      (jsonrpc-request (passepartout--ensure-connection)
                                       :_passepartout/mcp/trust
                                       (list :cwd root :expectedSha256 sha256))
                    (jsonrpc-error
                     (user-error "Not trusted: %s" (passepartout--error-message err))))))
      (message "passepartout: trusted %s (sha256 %s): %s start in new sessions"
               (abbreviate-file-name file)
               (substring (plist-get result :sha256) 0 12)
               (mapconcat #'identity (append (plist-get result :servers) nil) ", "))
      result)))

(provide 'passepartout-mcp)
;;; passepartout-mcp.el ends here
