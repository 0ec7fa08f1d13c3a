;;; bench-latency.el --- How long a keystroke waits while 1 MB streams  -*- lexical-binding: t; -*-

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

;; Replays a 1 MB answer into a real chat buffer, as the daemon sends
;; it (JSON-RPC `session/update' notifications of 4 KiB, each parsed
;; from its JSON text and handed to the package's dispatcher), while a
;; probe timer every 5 ms notes the longest time Emacs did not get
;; back to its command loop: the longest a keystroke could have waited.
;; The measure runs from the first chunk until one second after the
;; turn ended (so the end-of-turn save and refontification count).
;;
;; Batch (no redisplay, so a floor):
;;
;;   emacs -batch -Q -L elisp -L tests/elisp -l bench-latency -f bench-latency-batch
;;
;; A real terminal Emacs under tmux, with a key typed every 100 ms
;; (each key's wait is measured from the moment tmux was told to send
;; it): tests/elisp/bench-latency.sh, which runs both shapes of answer.
;;
;; BENCH_LATENCY_SHAPE is `lines' (a line break every 80 characters,
;; the default) or `one-line'; BENCH_LATENCY_KB the answer's size
;; (default 1000); BENCH_LATENCY_INTERVAL the seconds between two
;; notifications (default 0.005: a fast model; the daemon coalesces
;; deltas into a notification per 20 ms or 4 KiB).

;;; Code:

(require 'cl-lib)
(require 'json)
(require 'passepartout)

(defvar bench-latency--probe-interval 0.005
  "Seconds between two runs of the probe timer.")

(defvar bench-latency--chunk-bytes 4096
  "Bytes of answer per notification (the daemon's coalescing limit).")

(defvar bench-latency--state nil
  "Plist of the running measure.")

(defun bench-latency--env (name default)
  "The environment variable NAME, or DEFAULT when unset or empty."
  (let ((v (getenv name)))
    (if (and v (not (string-empty-p v))) v default)))

(defun bench-latency--frames (kilobytes shape)
  "Return the JSON texts of the notifications streaming KILOBYTES of SHAPE."
  (let* ((total (* kilobytes 1000))
         (line (concat (make-string 79 ?w) "\n"))
         (frames nil)
         (sent 0)
         (i 0))
    (while (< sent total)
      (let* ((n (min bench-latency--chunk-bytes (- total sent)))
             (text (if (equal shape "one-line")
                       (let ((s (make-string n ?w)))
                         ;; Words, so the line is prose, not one token.
                         (dotimes (k (/ n 8)) (aset s (* 8 k) ?\s))
                         s)
                     (let ((s (make-string n ?w)))
                       (dotimes (k (/ n (length line)))
                         (aset s (+ (* k (length line)) (1- (length line))) ?\n))
                       s))))
        (push (json-serialize
               `(:jsonrpc "2.0" :method "session/update"
                          :params (:sessionId "bench"
                                              :update (:sessionUpdate "agent_message_chunk"
                                                                      :content (:type "text" :text ,text)))))
              frames)
        (cl-incf sent n)
        (cl-incf i)))
    (nreverse frames)))

(defun bench-latency--probe ()
  "Note the time since the last probe, when a turn is being measured."
  (let ((now (float-time))
        (last (plist-get bench-latency--state :last)))
    (when (and last (plist-get bench-latency--state :measuring))
      (let ((gap (- now last)))
        (when (> gap 0.03)
          (push (list (- last (plist-get bench-latency--state :started)) gap
                      (/= gcs-done (plist-get bench-latency--state :probe-gcs)))
                (plist-get bench-latency--state :long-gaps)))
        (when (> gap (plist-get bench-latency--state :max-gap))
          (setq bench-latency--state (plist-put bench-latency--state :max-gap gap)))))
    (setq bench-latency--state (plist-put bench-latency--state :last now))
    (setq bench-latency--state (plist-put bench-latency--state :probe-gcs gcs-done))))

(defun bench-latency--feed ()
  "Hand the next notification to the package, as jsonrpc's filter would."
  (let ((frames (plist-get bench-latency--state :frames)))
    (if frames
        (let ((message (json-parse-string (car frames) :object-type 'plist
                                          :null-object nil :false-object :json-false)))
          (setq bench-latency--state (plist-put bench-latency--state :frames (cdr frames)))
          (passepartout--dispatch-notification
           nil (intern (plist-get message :method)) (plist-get message :params)))
      (cancel-timer (plist-get bench-latency--state :feeder))
      (with-current-buffer (plist-get bench-latency--state :buffer)
        (passepartout-chat-end-turn))
      (setq bench-latency--state
            (plist-put bench-latency--state :ended (float-time)))
      (run-at-time 1.0 nil #'bench-latency--finish))))

(defun bench-latency--finish ()
  "Stop measuring and call the :done function of the state."
  (setq bench-latency--state (plist-put bench-latency--state :measuring nil))
  (cancel-timer (plist-get bench-latency--state :probe))
  (funcall (plist-get bench-latency--state :done)))

(defun bench-latency--chat ()
  "Return a chat buffer with a running turn of the fake session \"bench\"."
  (let* ((root (file-name-as-directory (make-temp-file "bench-latency-project" t)))
         (passepartout-chat-directory (make-temp-file "bench-latency-chats" t))
         (buffer (passepartout-chat-buffer root)))
    (with-current-buffer buffer
      (setq passepartout-chat--session-id "bench")
      (puthash "bench" buffer passepartout-chat--sessions)
      ;; As a new session does: later saves write what changed.
      (passepartout-chat-save)
      (goto-char (point-max))
      (insert "Write a long answer.")
      (passepartout-chat-begin-turn))
    buffer))

(defun bench-latency-start (done)
  "Start streaming into a new chat buffer shown in the selected window.
Call DONE with no argument one second after the turn ended."
  (let* ((kb (string-to-number (bench-latency--env "BENCH_LATENCY_KB" "1000")))
         (shape (bench-latency--env "BENCH_LATENCY_SHAPE" "lines"))
         (interval (string-to-number (bench-latency--env "BENCH_LATENCY_INTERVAL" "0.005")))
         (frames (bench-latency--frames kb shape))
         (buffer (bench-latency--chat)))
    (switch-to-buffer buffer)
    ;; Org's first display of the buffer (loading its modules, fontifying
    ;; the window) is not part of streaming.
    (redisplay t)
    (garbage-collect)
    (setq bench-latency--state
          (list :frames frames :buffer buffer :max-gap 0.0 :measuring t
                :kb kb :shape shape :interval interval :done done
                :started (float-time) :gcs gcs-done :gc-elapsed gc-elapsed))
    (setq bench-latency--state
          (plist-put bench-latency--state :probe
                     (run-at-time 0 bench-latency--probe-interval #'bench-latency--probe)))
    (setq bench-latency--state
          (plist-put bench-latency--state :feeder
                     (run-at-time 0 interval #'bench-latency--feed)))))

(defun bench-latency--summary ()
  "One line saying what was measured."
  (format "Emacs %s, Org %s, %d KB as %s, a 4 KiB notification every %s s: stream %.2f s, longest gap %.1f ms (probe every %d ms; gaps over 30 ms, at seconds from the start, * when Emacs collected garbage in it: %s; %d GCs, %.0f ms in all)"
          emacs-version (org-version)
          (plist-get bench-latency--state :kb) (plist-get bench-latency--state :shape)
          (plist-get bench-latency--state :interval)
          (- (plist-get bench-latency--state :ended) (plist-get bench-latency--state :started))
          (* 1000 (- (plist-get bench-latency--state :max-gap) bench-latency--probe-interval))
          (* 1000 bench-latency--probe-interval)
          (mapconcat (lambda (g) (format "%.0f ms at %.2f%s" (* 1000 (nth 1 g)) (nth 0 g)
                                         (if (nth 2 g) "*" "")))
                     (reverse (plist-get bench-latency--state :long-gaps)) ", ")
          (- gcs-done (plist-get bench-latency--state :gcs))
          (* 1000 (- gc-elapsed (plist-get bench-latency--state :gc-elapsed)))))

(defun bench-latency-batch ()
  "Run the measure in batch and print it (no redisplay: a floor)."
  (let ((done nil))
    (bench-latency-start (lambda () (setq done t)))
    (while (not done) (accept-process-output nil 0.001))
    (princ (concat "batch: " (bench-latency--summary) "\n"))))

;;;; A terminal Emacs, with keys typed through tmux

(defvar bench-latency--keys nil
  "Times at which the typed keys' commands ran, newest first.")

(defun bench-latency--note-key ()
  "Note when a typed key's command has run."
  (when (eq last-command-event ?x)
    (push (float-time) bench-latency--keys)))

(defun bench-latency-terminal ()
  "Measure in this terminal Emacs; report to the directory BENCH_LATENCY_OUT.
Writes `ready' when keys may be sent, and `result' (then exits) when
done.  The sender appends each key's sending time to `sent'."
  ;; After the start-up screen and buffer are settled, not during them.
  (run-at-time 0.5 nil #'bench-latency--terminal-start))

(defun bench-latency--terminal-start ()
  "Start the measure of `bench-latency-terminal'."
  (let ((out (file-name-as-directory (getenv "BENCH_LATENCY_OUT"))))
    (add-hook 'post-command-hook #'bench-latency--note-key)
    (when (bench-latency--env "BENCH_LATENCY_PROFILE" nil) (profiler-start 'cpu))
    (bench-latency-start
     (lambda ()
       (let* ((sent (with-temp-buffer
                      (insert-file-contents (expand-file-name "sent" out))
                      (mapcar #'string-to-number (split-string (buffer-string)))))
              (got (reverse bench-latency--keys))
              (from (plist-get bench-latency--state :started))
              (to (+ (plist-get bench-latency--state :ended) 1.0))
              (waits (cl-loop for s in sent for g in got
                              when (and (>= s from) (<= s to)) collect (- g s))))
         (when (bench-latency--env "BENCH_LATENCY_PROFILE" nil)
           (profiler-stop)
           (profiler-write-profile (profiler-cpu-profile) (bench-latency--env "BENCH_LATENCY_PROFILE" nil)))
         (with-temp-file (expand-file-name "result" out)
           (insert (format "terminal: %s; %d keys typed while it streamed (of %d sent, %d received), longest key wait %.1f ms, median %.1f ms\n"
                           (bench-latency--summary) (length waits) (length sent) (length got)
                           (* 1000 (apply #'max 0 waits))
                           (* 1000 (if waits (nth (/ (length waits) 2) (sort (copy-sequence waits) #'<)) 0)))))
         (kill-emacs 0))))
    (with-temp-file (expand-file-name "ready" out) (insert "go\n"))))

;;; bench-latency.el ends here
