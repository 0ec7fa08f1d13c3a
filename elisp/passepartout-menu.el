;;; passepartout-menu.el --- Provider and model menu for passepartout  -*- lexical-binding: t; -*-

;;; Commentary:

;; Placeholder while the menu is written.

;;; Code:

(provide 'passepartout-menu)
;;; passepartout-menu.el ends here
