package cli

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// progress reports how far a long operation (a load, a verify) has come.
// With a bar (stderr is a terminal and the log format is text) it redraws
// one line, github.com/schollz/progressbar's, with bytes done, rate and
// ETA. Without one it logs a structured line at info every 10% (percent,
// bytes, total, rate, eta), which is what a journal or a log collector
// wants. It is safe for concurrent use; update may be called with the same
// or growing values.
type progress struct {
	what  string
	w     io.Writer
	bar   bool
	log   hclog.Logger
	start time.Time

	mu       sync.Mutex
	pb       *progressbar.ProgressBar
	lastStep uint64
	logged   bool // the 100% line was logged
	total    uint64
	done     uint64
}

// newProgress returns a progress reporter for what ("loading",
// "verifying"): a bar on w when bar is true, else lines through log.
func newProgress(what string, w io.Writer, log hclog.Logger, bar bool) *progress {
	return &progress{what: what, w: w, bar: bar, log: log, start: time.Now()}
}

// progressBarWidth is the bar's width in characters.
const progressBarWidth = 30

// progressLogSteps is how many log lines (one per step) a run without a
// bar prints at most, plus the final one.
const progressLogSteps = 10

// update records that done of total bytes are through. A zero total (an
// empty checkpoint) shows nothing.
func (p *progress) update(done, total uint64) {
	if total == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = min(done, total), total
	if !p.bar {
		p.logStep()
		return
	}
	if p.pb == nil {
		p.pb = progressbar.NewOptions64(int64(total),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.what),
			progressbar.OptionSetWidth(progressBarWidth),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { io.WriteString(p.w, "\n") }),
		)
		p.pb.StartWithoutRender()
	}
	p.pb.Set64(int64(p.done))
}

// logStep logs a line when done crossed the next tenth (and once at 100%).
func (p *progress) logStep() {
	step := p.done * progressLogSteps / p.total
	final := p.done == p.total
	if step <= p.lastStep && !(final && !p.logged) {
		return
	}
	p.lastStep, p.logged = step, final
	elapsed := time.Since(p.start)
	rate := float64(p.done) / max(elapsed.Seconds(), 1e-9)
	args := []any{"percent", p.done * 100 / p.total, "bytes", p.done, "total", p.total,
		"rate", humanBytes(uint64(rate)) + "/s"}
	if !final && rate > 0 {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		args = append(args, "eta", eta.Round(100*time.Millisecond).String())
	} else {
		args = append(args, "elapsed", elapsed.Round(time.Millisecond).String())
	}
	p.log.Info(p.what, args...)
}

// finish ends the bar's line: complete when everything was reported, left
// where it stopped (an error) otherwise. Without a bar it does nothing.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pb == nil || p.pb.IsFinished() {
		return
	}
	if p.done == p.total {
		p.pb.Finish()
		return
	}
	p.pb.Exit()
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
