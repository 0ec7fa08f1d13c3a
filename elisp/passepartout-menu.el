;;; passepartout-menu.el --- Provider and model menu for passepartout  -*- lexical-binding: t; -*-

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

;; `passepartout-menu' (C-c C-s in a chat buffer) is a transient menu,
;; like gptel's: pick the provider, the model (completed from what the
;; provider's server lists) and the output limit for this chat's
;; session, then apply.  The daemon keeps running and the configuration
;; file is untouched: the choice is sent with
;; `_passepartout/session/configure', saved in the chat file, and sent
;; again when the chat is resumed.  The menu also reaches the plans, the
;; saved chats, the events and the daemon's log, and restarts it.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'transient)
(require 'passepartout-rpc)
(require 'passepartout-chat)

(declare-function passepartout-plans "passepartout")
(declare-function passepartout-events "passepartout")
(declare-function passepartout-restart "passepartout")
(declare-function passepartout-stderr "passepartout")
(declare-function passepartout-log "passepartout")
(declare-function passepartout-chats "passepartout-chats")

(defvar passepartout-menu--providers nil
  "The last `_passepartout/providers' answer, as a list of plists.")

(defun passepartout-menu--providers (&optional refresh)
  "Return the daemon's providers (a list of plists), asking it if needed.
With REFRESH, ask again."
  (when (or refresh (null passepartout-menu--providers))
    (let ((result (jsonrpc-request (passepartout--ensure-connection)
                                   :_passepartout/providers nil :timeout 15)))
      (setq passepartout-menu--providers (append (plist-get result :providers) nil))))
  passepartout-menu--providers)

(defun passepartout-menu--chat ()
  "Return the chat buffer the menu acts on, or signal."
  (or (and (derived-mode-p 'passepartout-chat-mode) (current-buffer))
      (user-error "Use the menu from a passepartout chat buffer (M-x passepartout)")))

(defun passepartout-menu--read-provider (prompt _initial history)
  "Read a provider name with PROMPT and HISTORY."
  (let ((names (mapcar (lambda (p) (plist-get p :name)) (passepartout-menu--providers))))
    (completing-read prompt names nil t nil history)))

(defun passepartout-menu--read-model (prompt _initial history)
  "Read a model name with PROMPT and HISTORY.
Candidates are the models of the provider chosen in the menu (else the
first), as its server lists them; any other name may be typed."
  (let* ((chosen (ignore-errors
                   (transient-arg-value "--provider=" (transient-args 'passepartout-menu))))
         (providers (passepartout-menu--providers))
         (provider (or (cl-find chosen providers
                                :key (lambda (p) (plist-get p :name)) :test #'equal)
                       (car providers)))
         (models (append (plist-get provider :models) nil)))
    (completing-read prompt models nil nil nil history (plist-get provider :model))))

(transient-define-infix passepartout-menu--provider ()
  :description "Provider"
  :class 'transient-option
  :key "p"
  :argument "--provider="
  :reader #'passepartout-menu--read-provider)

(transient-define-infix passepartout-menu--model ()
  :description "Model"
  :class 'transient-option
  :key "m"
  :argument "--model="
  :reader #'passepartout-menu--read-model)

(transient-define-infix passepartout-menu--max-tokens ()
  :description "Output limit (tokens)"
  :class 'transient-option
  :key "t"
  :argument "--max-tokens="
  :reader #'transient-read-number-N+)

(defun passepartout-menu--current ()
  "Describe the current chat's provider settings, for the menu's title."
  (let ((buffer (and (derived-mode-p 'passepartout-chat-mode) (current-buffer))))
    (if (not buffer)
        "passepartout"
      (format "passepartout: %s / %s"
              (or (passepartout-chat--get-property "PASSEPARTOUT_PROVIDER") "default provider")
              (or (passepartout-chat--get-property "PASSEPARTOUT_MODEL") "default model")))))

(defun passepartout-menu-apply-settings (provider model max-tokens)
  "Use PROVIDER, MODEL and MAX-TOKENS (each may be nil) in this chat's session.
Return the daemon's answer.  The choice is saved in the chat file and
applied again when the chat is resumed."
  (let ((chat (passepartout-menu--chat)))
    (with-current-buffer chat
      (let* ((session (passepartout-chat--ensure-session))
             (result (jsonrpc-request
                      (passepartout--ensure-connection)
                      :_passepartout/session/configure
                      `(:sessionId ,session
                                   ,@(and provider (list :provider provider))
                                   ,@(and model (list :model model))
                                   ,@(and max-tokens (list :maxTokens max-tokens))))))
        (passepartout-chat--set-property "PASSEPARTOUT_PROVIDER" (plist-get result :provider))
        (passepartout-chat--set-property "PASSEPARTOUT_MODEL" (plist-get result :model))
        (if-let ((max (plist-get result :maxTokens)))
            (passepartout-chat--set-property "PASSEPARTOUT_MAX_TOKENS" (format "%s" max)))
        (passepartout-chat-save)
        (message "passepartout: this chat now uses %s / %s"
                 (plist-get result :provider) (plist-get result :model))
        result))))

(transient-define-suffix passepartout-menu-apply (args)
  "Apply the menu's provider, model and output limit to this chat's session."
  :key "RET"
  :description "Use for this chat"
  (interactive (list (transient-args 'passepartout-menu)))
  (let ((max (transient-arg-value "--max-tokens=" args)))
    (passepartout-menu-apply-settings
     (transient-arg-value "--provider=" args)
     (transient-arg-value "--model=" args)
     (and max (string-to-number max)))))

(defun passepartout-menu-refresh-models ()
  "Ask the daemon again which models its providers offer."
  (interactive)
  (passepartout-menu--providers t)
  (message "passepartout: %s"
           (mapconcat (lambda (p)
                        (format "%s: %d models%s" (plist-get p :name)
                                (length (plist-get p :models))
                                (if-let ((e (plist-get p :modelsError)))
                                    (format " (%s)" e) "")))
                      passepartout-menu--providers "; ")))

;;;###autoload (autoload 'passepartout-menu "passepartout-menu" nil t)
(transient-define-prefix passepartout-menu ()
  "Provider, model and settings for this chat; and the other commands."
  [:description passepartout-menu--current
   ["This chat's session"
    (passepartout-menu--provider)
    (passepartout-menu--model)
    (passepartout-menu--max-tokens)
    ("g" "Refresh the model lists" passepartout-menu-refresh-models :transient t)
    (passepartout-menu-apply)
    ("M" "Session mode (read-only, ask, auto)" passepartout-set-mode)]
   ["Elsewhere"
    ("P" "Flight plans waiting" passepartout-plans)
    ("c" "Saved chats" passepartout-chats)
    ("e" "Events (JSON-RPC log)" passepartout-events)
    ("l" "Daemon's log file" passepartout-log)
    ("w" "Daemon's warnings (stderr)" passepartout-stderr)
    ("r" "Restart the daemon" passepartout-restart)]])

(defun passepartout-menu--reapply ()
  "Send the chat file's saved provider settings again to a new or resumed session."
  (let ((provider (passepartout-chat--get-property "PASSEPARTOUT_PROVIDER"))
        (model (passepartout-chat--get-property "PASSEPARTOUT_MODEL"))
        (max (passepartout-chat--get-property "PASSEPARTOUT_MAX_TOKENS")))
    (when (or provider model max)
      (condition-case err
          (jsonrpc-request (passepartout--ensure-connection)
                           :_passepartout/session/configure
                           `(:sessionId ,passepartout-chat--session-id
                                        ,@(and provider (list :provider provider))
                                        ,@(and model (list :model model))
                                        ,@(and max (list :maxTokens (string-to-number max)))))
        (jsonrpc-error
         (passepartout-chat--note
          (format "The saved provider settings (%s / %s) could not be applied: %s"
                  provider model (passepartout--error-message err))))))))

(add-hook 'passepartout-chat-session-hook #'passepartout-menu--reapply)
(defun passepartout-menu--forget-providers (_conn)
  "Forget the providers listed by a daemon: a new one may list others."
  (setq passepartout-menu--providers nil))

;; The package's own hooks: registering here changes nothing outside it.
(add-hook 'passepartout-connection-started-hook #'passepartout-menu--forget-providers)

(provide 'passepartout-menu)
;;; passepartout-menu.el ends here
