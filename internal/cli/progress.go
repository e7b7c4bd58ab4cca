package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// progress renders load progress: a redrawn bar on a terminal, a log line
// every 10% otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	log   hclog.Logger
	start time.Time

	mu       sync.Mutex
	lastDraw time.Time
	lastStep uint64
	drawn    bool
}

func newProgress(w io.Writer, log hclog.Logger) *progress {
	return &progress{w: w, tty: isTerminal(w), log: log, start: time.Now()}
}

// progressBarWidth is the bar's width in characters.
const progressBarWidth = 30

func (p *progress) update(done, total uint64) {
	if total == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rate := float64(done) / max(time.Since(p.start).Seconds(), 1e-9)
	if !p.tty {
		step := done * 10 / total
		if step > p.lastStep || (done == total && !p.drawn) {
			p.lastStep = step
			p.drawn = done == total
			p.log.Info("loading", "percent", done*100/total, "bytes", done, "total", total,
				"rate", humanBytes(uint64(rate))+"/s")
		}
		return
	}
	if done < total && time.Since(p.lastDraw) < 100*time.Millisecond {
		return
	}
	p.lastDraw = time.Now()
	filled := int(done * progressBarWidth / total)
	fmt.Fprintf(p.w, "\rloading [%s%s] %3d%% %s / %s  %s/s ", strings.Repeat("=", filled),
		strings.Repeat(" ", progressBarWidth-filled), done*100/total, humanBytes(done), humanBytes(total),
		humanBytes(uint64(rate)))
	p.drawn = true
}

// finish ends the bar's line.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
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
