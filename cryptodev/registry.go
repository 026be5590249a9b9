package cryptodev

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Factory opens an engine with its defaults.
type Factory func() (Engine, error)

// Wrapper opens an engine that runs over another, synchronous one (a
// scheduler over a cipher implementation). It owns inner from then on and
// closes it when it is closed, also when it returns an error.
type Wrapper func(inner Engine) (Engine, error)

type registration struct {
	name     string
	priority int
	factory  Factory
	wrap     Wrapper // nil: the engine does not run over another
}

var (
	regMu sync.Mutex
	regs  []registration
)

// Register makes an engine available by name. Engines register themselves
// in an init function; a higher priority wins when no engine is named.
func Register(name string, priority int, f Factory) {
	register(registration{name: name, priority: priority, factory: f})
}

// RegisterWrapper makes an engine that runs over another available: Open
// of "NAME:INNER" opens the engine registered as INNER and hands it to w;
// Open of "NAME" alone calls f, which picks the inner engine's default.
func RegisterWrapper(name string, priority int, f Factory, w Wrapper) {
	register(registration{name: name, priority: priority, factory: f, wrap: w})
}

func register(r registration) {
	if r.name == "" || strings.Contains(r.name, ":") {
		panic("cryptodev: invalid engine name: " + r.name)
	}
	regMu.Lock()
	defer regMu.Unlock()
	for _, o := range regs {
		if o.name == r.name {
			panic("cryptodev: engine registered twice: " + r.name)
		}
	}
	regs = append(regs, r)
	sort.SliceStable(regs, func(i, j int) bool { return regs[i].priority > regs[j].priority })
}

// Engines lists the registered engine names, highest priority first. An
// engine that runs over another may also be named "NAME:INNER" (see
// RegisterWrapper and CheckEngine).
func Engines() []string {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]string, len(regs))
	for i, r := range regs {
		out[i] = r.name
	}
	return out
}

// lookup finds the registration of name; ok is false if there is none. It
// also returns the names registered, for errors.
func lookup(name string) (r registration, ok bool, names []string) {
	regMu.Lock()
	defer regMu.Unlock()
	for _, x := range regs {
		if !ok && (name == "" || x.name == name) {
			r, ok = x, true
		}
		names = append(names, x.name)
	}
	return r, ok, names
}

// CheckEngine reports whether Open could find what name names, without
// opening anything: a registered engine, or "OUTER:INNER" where OUTER is
// registered with RegisterWrapper and INNER is a registered engine that
// does not itself run over another. Whether INNER is synchronous is known
// only when it is opened. The error says what would be valid.
func CheckEngine(name string) error {
	outer, inner, composite := strings.Cut(name, ":")
	r, ok, names := lookup(outer)
	in := ""
	if composite {
		in = fmt.Sprintf(" in %q", name)
	}
	if !ok || outer == "" {
		return fmt.Errorf("cryptodev: engine %q%s is not registered (registered: %s)", outer, in, strings.Join(names, ", "))
	}
	if !composite {
		return nil
	}
	if r.wrap == nil {
		return fmt.Errorf("cryptodev: engine %q%s does not run over another engine (engines that do: %s)", outer, in, strings.Join(wrappers(), ", "))
	}
	ir, ok, _ := lookup(inner)
	if !ok || inner == "" {
		return fmt.Errorf("cryptodev: inner engine %q%s is not registered (registered: %s)", inner, in, strings.Join(names, ", "))
	}
	if ir.wrap != nil {
		return fmt.Errorf("cryptodev: inner engine %q%s runs over another engine itself; name a synchronous engine", inner, in)
	}
	return nil
}

// wrappers lists the engines registered with RegisterWrapper.
func wrappers() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for _, r := range regs {
		if r.wrap != nil {
			out = append(out, r.name)
		}
	}
	return out
}

// Open opens the engine registered as name; an empty name opens the
// highest-priority engine. "OUTER:INNER" opens INNER and runs OUTER over
// it (see RegisterWrapper).
func Open(name string) (Engine, error) {
	outer, inner, composite := strings.Cut(name, ":")
	if composite {
		if err := CheckEngine(name); err != nil {
			return nil, err
		}
	}
	r, ok, names := lookup(outer)
	if !ok {
		return nil, fmt.Errorf("cryptodev: unknown engine %q (registered: %s)", name, strings.Join(names, ", "))
	}
	if !composite {
		return r.factory()
	}
	ie, err := Open(inner)
	if err != nil {
		return nil, err
	}
	return r.wrap(ie)
}
