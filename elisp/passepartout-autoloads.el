;;; passepartout-autoloads.el --- automatically extracted autoloads  -*- lexical-binding: t -*-
;;
;;; Code:


;;;### (autoloads nil "passepartout" "passepartout.el" (0 0 0 0))
;;; Generated autoloads from passepartout.el

(autoload 'passepartout "passepartout" "\
Chat with passepartout about the current project.
Start the daemon if it is not running, then show the Org chat buffer
of the project around `default-directory' (with a prefix argument, ask
for DIRECTORY).  When the project has no chat buffer but a saved chat,
offer to resume the last one (from Lisp: RESUME non-nil resumes it).

\(fn &optional DIRECTORY RESUME)" t nil)

(autoload 'passepartout-plans "passepartout" "\
List the flight plans waiting for a decision.
Start the daemon if it is not running: it knows the plans waiting from
before." t nil)

(autoload 'passepartout-new-skill "passepartout" "\
Create a skill called NAME in DIRECTORY from a template, and visit it.
Interactively, ask whether it belongs to you (every project) or to the
current project.

\(fn NAME DIRECTORY)" t nil)

(autoload 'passepartout-skill-mode-maybe "passepartout" "\
Turn on `passepartout-skill-mode' if this Org buffer is a skill file.
Add it to `org-mode-hook' to check skills as you edit them." nil nil)

(autoload 'passepartout-events "passepartout" "\
Show the JSON-RPC messages exchanged with the daemon; return the buffer.
When the log is off (`passepartout-events-buffer-size' 0, the default),
turn it on for the running daemon, keeping
`passepartout-events-on-demand-size' characters." t nil)

(autoload 'passepartout-stderr "passepartout" "\
Show what the daemon wrote to its standard error." t nil)

(autoload 'passepartout-log "passepartout" "\
Show the daemon's log file (its INFO lines; stderr has only warnings).
The file is followed as it grows." t nil)

(autoload 'passepartout-shutdown "passepartout" "\
Stop the daemon.  Pending flight plans are kept for its next start." t nil)

(autoload 'passepartout-restart "passepartout" "\
Stop the daemon and start it again." t nil)

(register-definition-prefixes "passepartout" '("passepartout--"))

;;;***

;;;### (autoloads nil "passepartout-chat" "passepartout-chat.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-chat.el
 (autoload 'passepartout-set-mode "passepartout" nil t)

(register-definition-prefixes "passepartout-chat" '("passepartout-"))

;;;***

;;;### (autoloads nil "passepartout-chats" "passepartout-chats.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-chats.el

(autoload 'passepartout-chats "passepartout-chats" "\
List the saved chats; RET opens one and resumes its session." t nil)

(register-definition-prefixes "passepartout-chats" '("passepartout-chats-"))

;;;***

;;;### (autoloads nil "passepartout-elicit" "passepartout-elicit.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-elicit.el

(register-definition-prefixes "passepartout-elicit" '("passepartout-elicit-"))

;;;***

;;;### (autoloads nil "passepartout-fs" "passepartout-fs.el" (0 0
;;;;;;  0 0))
;;; Generated autoloads from passepartout-fs.el

(register-definition-prefixes "passepartout-fs" '("passepartout-fs--"))

;;;***

;;;### (autoloads nil "passepartout-history" "passepartout-history.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-history.el

(autoload 'passepartout-history "passepartout-history" "\
List the checkpoints of DIRECTORY (default: this project) and return the buffer.

\(fn &optional DIRECTORY)" t nil)

(autoload 'passepartout-undo "passepartout-history" "\
Undo checkpoint ID of DIRECTORY.
In the history buffer, ID is the checkpoint at point.  In a chat buffer
it is the newest change of that chat's session (never one another chat
made since: the daemon refuses, naming it, when this chat has none);
elsewhere it is the last applied checkpoint of this project.  With
CONFIRM (always, interactively), ask first.  Buffers visiting the files
the undo changed are reverted (one with unsaved edits only if you say
so).  Returns the daemon's answer (a plist with :undone, :tool,
:createdAt, :checkpoint and :summary).

\(fn &optional ID DIRECTORY CONFIRM)" t nil)

(autoload 'passepartout-undo-turn "passepartout-history" "\
Undo every change of TURN in DIRECTORY, all or nothing.
In the history buffer, TURN is the turn of the checkpoint at point;
elsewhere it is the last turn that changed this project.  The daemon
refuses, changing nothing, when any of the turn's files changed since.
With CONFIRM (always, interactively), ask first.  Buffers visiting the
files the undo changed are reverted, as by `passepartout-undo'.
Returns the daemon's answer (a plist with :turn, :undone, :checkpoint
and :summary).

\(fn &optional TURN DIRECTORY CONFIRM)" t nil)

(register-definition-prefixes "passepartout-history" '("passepartout-history-"))

;;;***

;;;### (autoloads nil "passepartout-mcp" "passepartout-mcp.el" (0
;;;;;;  0 0 0))
;;; Generated autoloads from passepartout-mcp.el
 (autoload 'passepartout-mcp-trust "passepartout" nil t)

(register-definition-prefixes "passepartout-mcp" '("passepartout-mcp-"))

;;;***

;;;### (autoloads nil "passepartout-menu" "passepartout-menu.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-menu.el
 (autoload 'passepartout-menu "passepartout-menu" nil t)

(register-definition-prefixes "passepartout-menu" '("passepartout-menu-"))

;;;***

;;;### (autoloads nil "passepartout-plan" "passepartout-plan.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-plan.el

(register-definition-prefixes "passepartout-plan" '("passepartout-plan"))

;;;***

;;;### (autoloads nil "passepartout-rpc" "passepartout-rpc.el" (0
;;;;;;  0 0 0))
;;; Generated autoloads from passepartout-rpc.el

(register-definition-prefixes "passepartout-rpc" '("passepartout-"))

;;;***

;;;### (autoloads nil "passepartout-skill" "passepartout-skill.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-skill.el
 (autoload 'passepartout-skill-trust "passepartout" nil t)

(register-definition-prefixes "passepartout-skill" '("passepartout-skill-"))

;;;***

;;;### (autoloads nil "passepartout-trust" "passepartout-trust.el"
;;;;;;  (0 0 0 0))
;;; Generated autoloads from passepartout-trust.el

(register-definition-prefixes "passepartout-trust" '("passepartout-trust-"))

;;;***

(provide 'passepartout-autoloads)
;; Local Variables:
;; version-control: never
;; no-byte-compile: t
;; no-update-autoloads: t
;; coding: utf-8
;; End:
;;; passepartout-autoloads.el ends here
