;;; bench-stream.el --- How streaming into a chat buffer scales  -*- lexical-binding: t; -*-

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

;; Streams a 100 KB answer (2000 chunks of 50 bytes) into a
;; `passepartout-chat-mode' buffer and prints the Emacs CPU time spent,
;; and the time per chunk in the first and the last 10% of the stream:
;; it must not grow with the size of the buffer.
;;
;;   emacs -batch -Q -L elisp -l tests/elisp/bench-stream.el
;;
;; Scenarios:
;; - "insert": the chat's chunk function alone (what the filter costs);
;; - "insert+fontify": also fontifies the last screenful after each chunk,
;;   as redisplay would when the buffer is visible;
;; - "big history": the same after 2 MB of earlier conversation;
;; - "daemon": when PASSEPARTOUT_BIN and PASSEPARTOUT_FAKE_PROVIDER are
;;   executable, answers of 100 KB, 1 MB and 5 MB (BENCH_STREAM_KB="100
;;   1000 5000") in 20-byte chunks through the real daemon and the fake
;;   provider: Emacs CPU for the whole turn and per KB, which must stay
;;   flat as the answer grows; then the first size again with the events
;;   buffer on (one printed line per message, no `pp').  BENCH_STREAM_CHUNK
;;   sets the bytes per notification (default 20).
;;
;; It prints figures and asserts nothing.

;;; Code:

(require 'cl-lib)
(require 'passepartout)

(defconst bench-stream--chunks 2000 "Chunks per answer.")
(defconst bench-stream--chunk-size 50 "Bytes per chunk.")

(defun bench-stream--chunk (i)
  "The I-th 50-byte chunk: words, with a line break now and then."
  (let ((s (format "chunk %05d of the answer, with some more words here. " i)))
    (concat (substring s 0 (- bench-stream--chunk-size 1))
            (if (zerop (% i 8)) "\n" " "))))

(defun bench-stream--cpu ()
  "CPU seconds used by Emacs so far."
  (float-time (get-internal-run-time)))

(defun bench-stream--run (label history fontify)
  "Stream one answer after HISTORY characters; FONTIFY the tail if non-nil.
Print a line of figures under LABEL."
  (with-temp-buffer
    (passepartout-chat-mode)
    (setq passepartout-chat--root default-directory)
    (let ((inhibit-message t))
      (when (> history 0)
        (let ((line "An earlier answer: a line of text to make the buffer big.\n"))
          (dotimes (_ (/ history (length line))) (insert line))))
      (passepartout-chat--new-prompt)
      (goto-char (point-max))
      (insert "Write a long answer.")
      (passepartout-chat-begin-turn))
    (let ((times (make-vector bench-stream--chunks 0.0))
          (start (bench-stream--cpu))
          (gc gcs-done))
      (dotimes (i bench-stream--chunks)
        (let ((t0 (bench-stream--cpu)))
          (passepartout-chat-insert-message (bench-stream--chunk i))
          (when fontify
            (font-lock-fontify-region (max (point-min) (- (point-max) 3000))
                                      (point-max)))
          (aset times i (- (bench-stream--cpu) t0))))
      (passepartout-chat-end-turn)
      (let* ((total (- (bench-stream--cpu) start))
             (tenth (/ bench-stream--chunks 10))
             (early (/ (cl-loop for i below tenth sum (aref times i)) tenth))
             (late (/ (cl-loop for i from (- bench-stream--chunks tenth)
                               below bench-stream--chunks
                               sum (aref times i))
                      tenth)))
        (princ (format "%-22s buffer %8d chars  cpu %7.1f ms  per chunk: first 10%% %6.1f us, last 10%% %6.1f us  (ratio %.2f, %d GCs)\n"
                       label (buffer-size) (* 1000 total)
                       (* 1e6 early) (* 1e6 late)
                       (if (> early 0) (/ late early) 0.0)
                       (- gcs-done gc)))))))

(defconst bench-stream--daemon-chunk-size
  (max 20 (string-to-number (or (getenv "BENCH_STREAM_CHUNK") "20")))
  "Bytes per chunk through the daemon (BENCH_STREAM_CHUNK, at least 20).
At 20, 100 KB is 5,000 stream events, the stream gptel was measured on
\(0.17-0.35 s of Emacs CPU); larger chunks show what fewer, coalesced
notifications cost.")

(defun bench-stream--daemon-chunk (i)
  "The I-th chunk: words, with a line break now and then."
  (let ((s (format "word %07d here. " i)))
    (concat (substring s 0 19)
            (make-string (- bench-stream--daemon-chunk-size 20) ?x)
            (if (zerop (% i 20)) "\n" " "))))

(defun bench-stream--daemon (label kilobytes events-size)
  "Stream KILOBYTES of answer through the real daemon, if it is built.
Print a line under LABEL with the Emacs CPU per KB; EVENTS-SIZE is
`passepartout-events-buffer-size'.  Return the CPU seconds per KB."
  (let ((bin (expand-file-name (or (getenv "PASSEPARTOUT_BIN") "target/debug/passepartout")))
        (fake (expand-file-name (or (getenv "PASSEPARTOUT_FAKE_PROVIDER")
                                    "target/debug/examples/fake_provider")))
        (chunks (/ (* kilobytes 1000) bench-stream--daemon-chunk-size)))
    (if (not (and (file-executable-p bin) (file-executable-p fake)))
        (princ (format "daemon: skipped (%s or %s missing; cargo build --bins --examples)\n"
                       bin fake))
      (require 'passepartout-test-support
               (expand-file-name "passepartout-test-support.el"
                                 (file-name-directory (or load-file-name buffer-file-name))))
      ;; The script is written chunk by chunk to a file, never held as one
      ;; Lisp structure: 250,000 live plists would make every garbage
      ;; collection during the turn slower, and the figures with it.
      (let ((script (make-temp-file "bench-script" nil ".json")))
        (with-temp-file script
          (insert "[{\"type\":\"open_ai\",\"delay_ms\":0,\"done\":true,\"chunks\":[")
          (dotimes (i chunks)
            (insert (json-serialize
                     `(:choices [(:index 0 :delta (:content ,(bench-stream--daemon-chunk i)))]))
                    ","))
          (insert "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}]}]"))
        (garbage-collect)
        (with-no-warnings
         ;; The daemon cuts an answer at `max_answer_bytes' (1 MiB by
         ;; default); the benchmark's answers may be larger.
         (let* ((config (make-temp-file "bench-config" nil ".toml"
                                        (format "max_answer_bytes = %d\n"
                                                (* 2 kilobytes 1000))))
                (process-environment (cons (concat "PASSEPARTOUT_CONFIG=" config)
                                           process-environment)))
          (passepartout-test-with-daemon script
            (let* ((passepartout-events-buffer-size events-size)
                   (chat (passepartout project))
                   (gc0 gc-elapsed)
                   (cpu0 (bench-stream--cpu))
                   (wall0 (float-time))
                   (events 0))
              (cl-letf* ((handler (symbol-function 'passepartout--dispatch-notification))
                         ((symbol-function 'passepartout--dispatch-notification)
                          (lambda (conn method params)
                            (cl-incf events)
                            (funcall handler conn method params))))
                (with-current-buffer chat
                  (goto-char (point-max))
                  (insert "Write a long answer.")
                  (passepartout-chat-send))
                (passepartout-test--wait-for
                    (null (buffer-local-value 'passepartout-chat--stream chat))
                  1800 "the end of the turn"))
              (let* ((cpu (- (bench-stream--cpu) cpu0))
                     (size (with-current-buffer chat
                             (- (point-max) (save-excursion
                                              (goto-char (point-min))
                                              (re-search-forward "^\\* passepartout\n")
                                              (point)))))
                     (per-kb (/ cpu (/ size 1000.0))))
                (princ (format "%-26s %6d KB answer  %7d notifications  cpu %8.2f s (gc %5.2f s)  wall %7.2f s  cpu/KB %6.2f ms\n"
                               label (/ size 1000) events cpu (- gc-elapsed gc0)
                               (- (float-time) wall0) (* 1000 per-kb)))
                (delete-file script)
                (delete-file config)
                per-kb)))))))))

(princ (format "Streaming %d chunks of %d bytes (%d KB) into a chat buffer, Emacs %s, Org %s\n"
               bench-stream--chunks bench-stream--chunk-size
               (/ (* bench-stream--chunks bench-stream--chunk-size) 1000)
               emacs-version (org-version)))
(bench-stream--run "insert" 0 nil)
(bench-stream--run "insert+fontify" 0 t)
(bench-stream--run "insert, big history" (* 2 1024 1024) nil)
(bench-stream--run "insert+fontify, big" (* 2 1024 1024) t)

(princ (format "\nThrough the real daemon and fake provider (%d-byte chunks; gptel: %s):\n"
               bench-stream--daemon-chunk-size
               (if (locate-library "gptel")
                   "installed, but not driven by this benchmark"
                 "not installed here; its anchor is 0.17-0.35 s for 100 KB / 5,000 events = 1.7-3.5 ms/KB")))
(let ((sizes (mapcar #'string-to-number
                     (split-string (or (getenv "BENCH_STREAM_KB") "100 1000 5000")))))
  (dolist (kb sizes)
    (bench-stream--daemon (format "daemon, events off") kb 0))
  (bench-stream--daemon "daemon, events on (2 MB)" (car sizes) (* 2 1024 1024)))

;;; bench-stream.el ends here
