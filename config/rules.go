package config

// rules.go reads and writes sections by rule tables. A section's keys are
// declared once, each by one rule: its name, its codec (how a value is
// read, checked and written back), where it goes in the model, and its
// default:
//
//	field("rekey_bytes", count("bytes", ""), 0, func(c *Child) *uint64 { return &c.RekeyBytes }),
//
// The decoder reads a table by its section's rules, reporting unknown and
// missing keys from the same list; the encoder (Connection.ToFile and its
// siblings) writes a model back by the same rules into the section's
// File type, whose field for a key is the one tagged with its name, so
// that File.Encode writes it and ParseGateway reads the same model back.
// A new key is one rule (and the fields it fills).
//
// Positions are not in the model: the decoder knows where every value is
// by its field path ("connection[2].children[1]"), and so does the
// Gateway after it (FieldPos).

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"time"
)

// A codec reads the value of one key and writes it back.
type codec[F any] struct {
	// read decodes e's value at field f; when it is not valid it reports
	// why and returns false.
	read func(d *gwDecoder, f string, e *Entry) (F, bool)
	// write returns the value as the section's File type holds it
	// (converted to the field's type: an int for an int64 field, a bool
	// for a *bool).
	write func(F) any
}

// A rule is one key of a section whose model is T.
type rule[T any] struct {
	key string
	// need, if not "", makes the key required: it says what to write in
	// the message about a missing key.
	need  string
	read  func(d *gwDecoder, f string, e *Entry, x *T) bool
	init  func(x *T)             // sets the default; nil leaves the zero value
	write func(x *T) (any, bool) // the value to write, false for none (the default); nil: never written
}

// field is the rule of a key read by c into the field dst returns; def
// is its default, which the encoder leaves out.
func field[T, F any](key string, c codec[F], def F, dst func(*T) *F) rule[T] {
	r := rule[T]{
		key: key,
		read: func(d *gwDecoder, f string, e *Entry, x *T) bool {
			v, ok := c.read(d, f, e)
			if ok {
				*dst(x) = v
			}
			return ok
		},
		write: func(x *T) (any, bool) {
			v := *dst(x)
			if reflect.DeepEqual(v, def) || reflect.ValueOf(&v).Elem().IsZero() && reflect.ValueOf(&def).Elem().IsZero() {
				return nil, false
			}
			return c.write(v), true
		},
	}
	if !reflect.ValueOf(&def).Elem().IsZero() {
		r.init = func(x *T) { *dst(x) = def }
	}
	return r
}

// checkOnly is the rule of a key that is read and checked, and has no
// place in the model (version = 2).
func checkOnly[T, F any](key string, c codec[F]) rule[T] {
	return rule[T]{key: key, read: func(d *gwDecoder, f string, e *Entry, _ *T) bool {
		_, ok := c.read(d, f, e)
		return ok
	}}
}

// required returns r as a required key; what says what it holds.
func (r rule[T]) required(what string) rule[T] {
	r.need = what
	return r
}

// A section is the rule table of one kind of table.
type section[T any] struct {
	file  reflect.Type // the section's File type
	rules []rule[T]
	keys  []string // the valid keys, in the rules' order
	index map[string]int
}

// newSection makes the section of rules, whose File type is file. The
// rules' order is the keys' order in messages and in the encoded text.
func newSection[T any](file reflect.Type, rules ...rule[T]) *section[T] {
	s := &section[T]{file: file, rules: rules, index: make(map[string]int, len(rules))}
	for i, r := range rules {
		if _, dup := s.index[r.key]; dup {
			panic("config: key " + r.key + " declared twice")
		}
		s.keys = append(s.keys, r.key)
		s.index[r.key] = i
	}
	return s
}

// defaults returns a model with every key's default.
func (s *section[T]) defaults() T {
	var x T
	for _, r := range s.rules {
		if r.init != nil {
			r.init(&x)
		}
	}
	return x
}

// decode reads the keys of t, the table at field f starting at pos, into
// x. It reports unknown keys, values that do not read, and required keys
// left out. It returns the keys given and whether all of them read.
func (s *section[T]) decode(d *gwDecoder, f string, pos Pos, t *Table, x *T) (seen map[string]bool, ok bool) {
	seen, ok = make(map[string]bool, len(t.Entries())), true
	for _, e := range t.Entries() {
		kf := fieldPath(f, e.Key)
		i, known := s.index[e.Key]
		if !known {
			d.errs = append(d.errs, unknownKey(e, kf, s.keys, ""))
			continue
		}
		seen[e.Key] = true
		if !s.rules[i].read(d, kf, e, x) {
			ok = false
		}
	}
	for _, r := range s.rules {
		if r.need != "" && !seen[r.key] {
			d.errorf(pos, f+"."+r.key, "missing required key (%s)", r.need)
		}
	}
	return seen, ok
}

// encode writes x into a new value of the section's File type.
func (s *section[T]) encode(x *T) reflect.Value {
	out := reflect.New(s.file).Elem()
	for _, r := range s.rules {
		if r.write == nil {
			continue
		}
		if v, ok := r.write(x); ok {
			setFileField(out, r.key, v)
		}
	}
	return out
}

// fileFields maps each File type to its fields by toml key.
var fileFields sync.Map // reflect.Type -> map[string]int

// setFileField sets the field of out tagged key to v, converting v to the
// field's type. A key with no field is a mistake in the rules, which
// TestFileCoversRules finds.
func setFileField(out reflect.Value, key string, v any) {
	t := out.Type()
	m, ok := fileFields.Load(t)
	if !ok {
		idx := map[string]int{}
		for i := range t.NumField() {
			k, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
			idx[k] = i
		}
		m, _ = fileFields.LoadOrStore(t, idx)
	}
	i, ok := m.(map[string]int)[key]
	if !ok {
		panic(fmt.Sprintf("config: %s has no field for key %s", t, key))
	}
	fv, val := out.Field(i), reflect.ValueOf(v)
	if fv.Kind() == reflect.Pointer && val.Kind() != reflect.Pointer {
		p := reflect.New(fv.Type().Elem())
		p.Elem().Set(val.Convert(fv.Type().Elem()))
		fv.Set(p)
		return
	}
	fv.Set(val.Convert(fv.Type()))
}

// Codecs: each reads through the decoder's typed readers, so that the
// messages are the same everywhere.

func asIs[F any](v F) any { return v }

// text is any string.
func text() codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) { return d.str(f, e.Value) }, write: asIs[string]}
}

// nameOf is a name; empty is the message for "".
func nameOf(empty string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) { return d.name(f, e.Value, empty) }, write: asIs[string]}
}

// checkedText is a string check accepts (it returns what is wrong, or "").
func checkedText(check func(string) string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) { return d.checked(f, e.Value, check) }, write: asIs[string]}
}

// choice is one of valid, what names it, help says what is valid (see
// decoder.oneOf).
func choice(what string, valid []string, help string) codec[string] {
	return codec[string]{read: func(d *gwDecoder, f string, e *Entry) (string, bool) { return d.oneOf(f, e.Value, what, valid, help) }, write: asIs[string]}
}

// parsedText is a string parse reads (see parsed); it is written back
// with its String method.
func parsedText[F fmt.Stringer](parse func(string) (F, string)) codec[F] {
	return codec[F]{
		read:  func(d *gwDecoder, f string, e *Entry) (F, bool) { return parsed(&d.decoder, f, e.Value, parse) },
		write: func(x F) any { return x.String() },
	}
}

// flag is a boolean.
func flag() codec[bool] {
	return codec[bool]{read: func(d *gwDecoder, f string, e *Entry) (bool, bool) { return d.boolean(f, e.Value) }, write: asIs[bool]}
}

type integer interface {
	~int | ~int64 | ~uint16 | ~uint32 | ~uint64
}

// intIn is an integer in lo..hi (see decoder.intIn).
func intIn[I integer](what string, lo, hi int64, want string) codec[I] {
	return codec[I]{
		read: func(d *gwDecoder, f string, e *Entry) (I, bool) {
			i, ok := d.intIn(f, e.Value, what, lo, hi, want)
			return I(i), ok
		},
		write: func(i I) any { return int64(i) },
	}
}

// count is a number of bytes or packets (unit): 0 for none. more is
// added to what the message about one out of range says.
func count(unit, more string) codec[uint64] {
	return intIn[uint64]("", 0, 1<<63-1, "0 for none, or a count of "+unit+more)
}

// durationIn is a duration in lo..hi; help says the default.
func durationIn(lo, hi time.Duration, help string) codec[time.Duration] {
	return codec[time.Duration]{
		read: func(d *gwDecoder, f string, e *Entry) (time.Duration, bool) {
			return d.durationIn(f, e.Value, lo, hi, help)
		},
		write: func(t time.Duration) any { return t.String() },
	}
}

// durationOrNone is durationIn that takes "0s" for none too.
func durationOrNone(lo, hi time.Duration, help string) codec[time.Duration] {
	c := durationIn(lo, hi, help)
	c.read = func(d *gwDecoder, f string, e *Entry) (time.Duration, bool) {
		return d.durationOrNone(f, e.Value, lo, hi, help)
	}
	return c
}

// stringList is an array of strings; example shows one.
func stringList(example string) codec[[]string] {
	return codec[[]string]{
		read: func(d *gwDecoder, f string, e *Entry) ([]string, bool) {
			elems, ok := d.strList(f, e.Value, example)
			if !ok {
				return nil, false
			}
			out := make([]string, 0, len(elems))
			for _, ev := range elems {
				s, _ := ev.Str()
				out = append(out, s)
			}
			return out, true
		},
		write: asIs[[]string],
	}
}

// prefixes is an array of prefixes parse reads (see decoder.prefixList);
// empty, if not "", is the message about an empty array.
func prefixes(example, what string, parse func(string) (netip.Prefix, string), empty string) codec[[]netip.Prefix] {
	return codec[[]netip.Prefix]{
		read: func(d *gwDecoder, f string, e *Entry) ([]netip.Prefix, bool) {
			ps, ok := d.prefixList(f, e.Value, example, what, parse)
			if ok && len(ps) == 0 && empty != "" {
				d.errorf(e.Value.Pos, f, "%s", empty)
				return nil, false
			}
			return ps, ok
		},
		write: func(ps []netip.Prefix) any {
			out := make([]string, len(ps))
			for i, p := range ps {
				out[i] = p.String()
			}
			return out
		},
	}
}

// addrList is an array of addresses that parse reads as single-address
// prefixes.
func addrList(example, what string, parse func(string) (netip.Prefix, string)) codec[[]netip.Addr] {
	return codec[[]netip.Addr]{
		read: func(d *gwDecoder, f string, e *Entry) ([]netip.Addr, bool) {
			ps, ok := d.prefixList(f, e.Value, example, what, parse)
			if !ok {
				return nil, false
			}
			out := make([]netip.Addr, len(ps))
			for i, p := range ps {
				out[i] = p.Addr()
			}
			return out, true
		},
		write: func(as []netip.Addr) any {
			out := make([]string, len(as))
			for i, a := range as {
				out[i] = a.String()
			}
			return out
		},
	}
}

// tableList is an array of tables read by sec ([[connection.children]]);
// after, if not nil, checks each once its keys are read.
func tableList[T any](sec *section[T], after func(d *gwDecoder, te tableElem, seen map[string]bool, x *T)) codec[[]T] {
	return codec[[]T]{
		read: func(d *gwDecoder, f string, e *Entry) ([]T, bool) {
			tables, _ := d.arrayOfTables(f, e.Value)
			var out []T
			for _, te := range tables {
				out = append(out, decodeElem(d, sec, te, after))
			}
			return out, true
		},
		write: func(xs []T) any {
			out := reflect.MakeSlice(reflect.SliceOf(sec.file), len(xs), len(xs))
			for i := range xs {
				out.Index(i).Set(sec.encode(&xs[i]))
			}
			return out.Interface()
		},
	}
}

// decodeElem reads one table of an array of tables by sec.
func decodeElem[T any](d *gwDecoder, sec *section[T], te tableElem, after func(d *gwDecoder, te tableElem, seen map[string]bool, x *T)) T {
	x := sec.defaults()
	seen, _ := sec.decode(d, te.field, te.pos, te.t, &x)
	if after != nil {
		after(d, te, seen, &x)
	}
	return x
}
