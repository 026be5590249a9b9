// Package logging builds the gateway's log handler: logfmt or JSON lines,
// a level per subsystem, and lines fit for the systemd journal.
//
// A subsystem is named by the "subsys" attribute of a logger
// (log.With("subsys", "ike")), as package gateway names the loggers it
// hands to ike, tls, dataplane and control. The handler filters each
// record at its subsystem's level (Levels), so `log_levels = { ike =
// "debug" }` tells an IKE negotiation's story without the rest of the
// gateway's debug lines, the way charon's filelog takes `ike = 2`.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Key is the attribute that names a logger's subsystem.
const Key = "subsys"

// Levels holds a log level for each subsystem and one for records of no
// known subsystem. Its methods may be called concurrently with logging:
// a level set takes effect on the next record.
type Levels struct {
	def  slog.LevelVar
	mu   sync.Mutex
	subs map[string]*slog.LevelVar // created on first use, never removed
}

// NewLevels returns levels that are all def.
func NewLevels(def slog.Level) *Levels {
	l := &Levels{subs: map[string]*slog.LevelVar{}}
	l.def.Set(def)
	return l
}

// varOf returns sub's level variable, made from the default level when
// sub has none yet; "" is the default's.
func (l *Levels) varOf(sub string) *slog.LevelVar {
	if sub == "" {
		return &l.def
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.subs[sub]
	if v == nil {
		v = new(slog.LevelVar)
		v.Set(l.def.Level())
		l.subs[sub] = v
	}
	return v
}

// Set sets sub's level; sub "" sets the level of records of no subsystem.
func (l *Levels) Set(sub string, level slog.Level) { l.varOf(sub).Set(level) }

// Level returns sub's level.
func (l *Levels) Level(sub string) slog.Level { return l.varOf(sub).Level() }

// ParseLevel parses "debug", "info", "warn" or "error".
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch s {
	case "debug", "info", "warn", "error":
		if err := l.UnmarshalText([]byte(s)); err == nil {
			return l, nil
		}
	}
	return 0, fmt.Errorf("logging: unknown log level %q (want debug, info, warn or error)", s)
}

// Options say how NewHandler writes.
type Options struct {
	// JSON writes one JSON object a line; otherwise lines are logfmt
	// (slog's TextHandler).
	JSON bool
	// Journal writes for the systemd journal (OnJournal): no time (the
	// journal stamps each line as it receives it) and a syslog priority
	// prefix ("<4>" for WARN), which the journal turns into the line's
	// priority (journalctl -p warning).
	Journal bool
	// Levels filters the records (nil: everything at info and above).
	Levels *Levels
}

// NewHandler returns a handler that writes records to w as o says.
func NewHandler(w io.Writer, o Options) slog.Handler {
	if o.Levels == nil {
		o.Levels = NewLevels(slog.LevelInfo)
	}
	out := &output{w: w, journal: o.Journal}
	ho := &slog.HandlerOptions{Level: slog.LevelDebug - 4} // Handler.Enabled filters
	if o.Journal {
		ho.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	var inner slog.Handler
	if o.JSON {
		inner = slog.NewJSONHandler(out, ho)
	} else {
		inner = slog.NewTextHandler(out, ho)
	}
	return &handler{inner: inner, out: out, levels: o.Levels, level: o.Levels.varOf("")}
}

// OnJournal reports whether f is the systemd journal's stream: systemd
// sets $JOURNAL_STREAM to "DEVICE:INODE" of the stream it connects a
// service's stdout and stderr to, and a process whose stderr is that file
// writes to the journal (systemd.exec(5)).
func OnJournal(f *os.File) bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == d && uint64(st.Ino) == i
}

// output is the writer all of one NewHandler's handlers share; in journal
// mode it puts the record's priority before each line.
type output struct {
	mu      sync.Mutex // held across a record's Handle in journal mode
	w       io.Writer
	journal bool
	prefix  string // the current record's priority, under mu
	buf     []byte
}

func (o *output) Write(p []byte) (int, error) {
	if !o.journal {
		return o.w.Write(p)
	}
	o.buf = append(append(o.buf[:0], o.prefix...), p...)
	if _, err := o.w.Write(o.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// priority is the syslog priority prefix for l (sd-daemon(3)).
func priority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

type handler struct {
	inner  slog.Handler
	out    *output
	levels *Levels
	level  *slog.LevelVar // the level of the subsystem a "subsys" attribute named, or the default
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.out.journal {
		return h.inner.Handle(ctx, r)
	}
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.prefix = priority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	for _, a := range as {
		if a.Key == Key {
			c.level = h.levels.varOf(a.Value.String())
		}
	}
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}
