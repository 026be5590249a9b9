package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IsTerminal reports whether f is a character device (a terminal): progress
// bars are drawn only there; elsewhere a Bar made by NewLines prints a line
// now and then instead.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Bar is a one-line progress bar over a known number of runs, redrawn in
// place with a carriage return. Rows printed while it shows go through
// Println, which clears the bar first. A nil *Bar does nothing, so callers
// need not check whether they are on a terminal. It is safe for concurrent
// use (the runners report progress from their coordinator goroutine).
//
// A Bar made by NewLines is for a log or a pipe: it draws nothing in place
// and prints a plain line when a run finishes, at most once per interval
// (and always for the last run).
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	total int
	done  int
	frac  float64
	label string
	start time.Time
	width int // of the last line drawn

	lines    bool          // NewLines: a line per finished run, no bar
	every    time.Duration // NewLines: the least time between two lines
	lastLine time.Time
}

// barCells is the number of cells between the brackets.
const barCells = 30

// NewBar starts a bar over total runs on w.
func NewBar(w io.Writer, total int) *Bar {
	return &Bar{w: w, total: max(total, 1), start: time.Now()}
}

// NewLines starts a line-printing Bar over total runs on w: see Bar.
func NewLines(w io.Writer, total int, every time.Duration) *Bar {
	return &Bar{w: w, total: max(total, 1), start: time.Now(), lines: true, every: every}
}

// Start names the run that begins.
func (b *Bar) Start(label string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.label, b.frac = label, 0
	b.draw()
}

// Progress sets the fraction of the current run that is done.
func (b *Bar) Progress(frac float64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frac = frac
	b.draw()
}

// Done counts the current run finished.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done++
	b.frac = 0
	if b.lines {
		b.printLine()
		return
	}
	b.draw()
}

// printLine prints the progress of a NewLines bar after a run finished;
// b.mu is held.
func (b *Bar) printLine() {
	now := time.Now()
	if b.done < b.total && now.Sub(b.lastLine) < b.every {
		return
	}
	b.lastLine = now
	el := now.Sub(b.start)
	left := "0s"
	if b.done < b.total {
		left = "about " + (time.Duration(float64(el)*float64(b.total)/float64(b.done)) - el).Round(time.Second).String()
	}
	fmt.Fprintf(b.w, "progress: %d/%d done (%d%%), %v elapsed, %s left; last: %s\n",
		b.done, b.total, 100*b.done/b.total, el.Round(time.Second), left, b.label)
}

// Println prints a line above the bar (to out) and redraws the bar.
func (b *Bar) Println(out io.Writer, line string) {
	if b == nil {
		fmt.Fprintln(out, line)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clear()
	fmt.Fprintln(out, line)
	b.draw()
}

// Finish removes the bar.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clear()
}

func (b *Bar) clear() {
	if b.width > 0 {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.width))
		b.width = 0
	}
}

// draw writes the bar; b.mu is held.
func (b *Bar) draw() {
	if b.lines {
		return
	}
	all := min(1, (float64(b.done)+b.frac)/float64(b.total))
	n := int(all * barCells)
	eta := "-"
	if el := time.Since(b.start); all > 0.01 {
		eta = (time.Duration(float64(el)/all) - el).Round(time.Second).String()
	}
	line := fmt.Sprintf("[%s%s] %d/%d eta %s  %s", strings.Repeat("=", n), strings.Repeat(" ", barCells-n),
		min(b.done+1, b.total), b.total, eta, b.label)
	pad := ""
	if len(line) < b.width {
		pad = strings.Repeat(" ", b.width-len(line))
	}
	fmt.Fprintf(b.w, "\r%s%s", line, pad)
	b.width = len(line)
}
