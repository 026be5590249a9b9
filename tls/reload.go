package tls

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// plan is a Reload that has loaded everything it needs and opened every
// new socket, and has changed nothing yet: commitLocked applies it, abort
// undoes what prepareLocked made.
type plan struct {
	items []planItem // in configuration order
}

type planItem struct {
	ep    *endpoint // existing, or new (fresh is set)
	fresh bool
	st    *epState
}

// abort destroys the keys and closes the sockets a failed Reload made.
func (p *plan) abort() {
	for _, it := range p.items {
		if it.st != nil {
			it.st.store.release()
		}
		if it.fresh {
			it.ep.ln.Close()
		}
	}
}

func (s *Service) findLocked(kind, name string) *endpoint {
	for _, e := range s.eps {
		if e.kind == kind && e.name == name {
			return e
		}
	}
	return nil
}

// prepareLocked validates cfg, loads its certificates and CAs and opens
// the sockets of new endpoints. The caller holds s.mu.
func (s *Service) prepareLocked(cfg Config) (*plan, error) {
	p := &plan{}
	seen := map[string]bool{}
	add := func(kind, name, listen string, dual bool, build func() (*epState, error)) error {
		if seen[name] {
			return fmt.Errorf("tls: name %q used twice", name)
		}
		seen[name] = true
		st, err := build()
		if err != nil {
			return err
		}
		it := planItem{st: st}
		if old := s.findLocked(kind, name); old != nil && old.dual == dual && (old.listen == listen || old.ln.Addr().String() == listen) {
			it.ep = old
		} else {
			ep, err := newEndpoint(s, kind, name, listen, dual)
			if err != nil {
				st.store.release()
				return err
			}
			it.ep, it.fresh = ep, true
		}
		p.items = append(p.items, it)
		return nil
	}
	for _, lc := range cfg.Listeners {
		n, err := normListener(lc)
		if err == nil {
			err = add("terminate", n.Name, n.Listen, n.DualStack, func() (*epState, error) { return s.buildListenerState(n) })
		}
		if err != nil {
			return p, err
		}
	}
	for _, oc := range cfg.Origins {
		n, err := normOrigin(oc)
		if err == nil {
			err = add("originate", n.Name, n.Listen, n.DualStack, func() (*epState, error) { return s.buildOriginState(n) })
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// commitLocked applies a prepared plan and returns a line per change. The
// caller holds s.mu.
func (s *Service) commitLocked(p *plan) []string {
	var lines []string
	kept := map[*endpoint]bool{}
	eps := make([]*endpoint, 0, len(p.items))
	for _, it := range p.items {
		eps = append(eps, it.ep)
		kept[it.ep] = true
	}
	for _, e := range s.eps {
		if kept[e] {
			continue
		}
		e.stopAccepting()
		e.state.Load().store.release()
		s.retired = append(s.retired, e)
		lines = append(lines, fmt.Sprintf("tls: %s %q on %s removed", kindWord(e.kind), e.name, e.ln.Addr()))
	}
	for _, it := range p.items {
		e := it.ep
		if it.fresh {
			e.start(it.st)
			lines = append(lines, fmt.Sprintf("tls: %s %q on %s added", kindWord(e.kind), e.name, e.ln.Addr()))
			continue
		}
		old := e.publish(it.st)
		select {
		case e.kick <- struct{}{}:
		default:
		}
		lines = append(lines, diffStates(e, old, it.st)...)
		old.store.release()
	}
	s.eps = eps
	// Retired endpoints whose connections have all ended are forgotten.
	s.retired = slices.DeleteFunc(s.retired, func(e *endpoint) bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.conns) == 0 && e.ctr.open.Load() == 0
	})
	return lines
}

func kindWord(kind string) string {
	if kind == "terminate" {
		return "listener"
	}
	return "origin"
}

// diffStates describes what a reload changed for one endpoint.
func diffStates(e *endpoint, old, cur *epState) []string {
	var lines []string
	pre := fmt.Sprintf("tls: %s %q: ", kindWord(e.kind), e.name)
	if old.engineName() != cur.engineName() {
		lines = append(lines, pre+fmt.Sprintf("engine %s -> %s", old.engineName(), cur.engineName()))
	}
	if !sameChains(old.store, cur.store) {
		lines = append(lines, pre+"certificates changed")
	}
	if !bytes.Equal(old.caSum, cur.caSum) {
		lines = append(lines, pre+"CA bundle changed")
	}
	var a, b reflect.Value
	if old.lc != nil {
		a, b = reflect.ValueOf(*old.lc), reflect.ValueOf(*cur.lc)
	} else {
		a, b = reflect.ValueOf(*old.oc), reflect.ValueOf(*cur.oc)
	}
	var fields []string
	for i := range a.NumField() {
		f := a.Type().Field(i).Name
		if f == "Name" || f == "Listen" || f == "Engine" {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			fields = append(fields, fmt.Sprintf("%s %v -> %v", f, fmtField(a.Field(i)), fmtField(b.Field(i))))
		}
	}
	if len(fields) > 0 {
		lines = append(lines, pre+strings.Join(fields, ", "))
	}
	return lines
}

func fmtField(v reflect.Value) any {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "none"
		}
		return v.Elem().Interface()
	}
	return v.Interface()
}
