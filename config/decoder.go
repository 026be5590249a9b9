package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder collects the errors found while decoding a document. Its typed
// readers are shared by the SA file and the gateway configuration: each
// reads one value, reports what is wrong with it at the value, and returns
// false then.
type decoder struct {
	errs Errors
}

func (d *decoder) errorf(pos Pos, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func unknownKey(e *Entry, field string, valid []string, hint string) *Error {
	msg := "unknown key"
	for _, k := range valid {
		if strings.EqualFold(k, e.Key) {
			return &Error{Pos: e.KeyPos, Field: field, Msg: fmt.Sprintf("unknown key (keys are case-sensitive: did you mean %s?)", k)}
		}
	}
	if hint != "" {
		msg += "; " + hint
	} else {
		msg += " (valid: " + strings.Join(valid, ", ") + ")"
	}
	return &Error{Pos: e.KeyPos, Field: field, Msg: msg}
}

// shortQuote quotes a user-supplied value for a message. A value that looks
// like hex key material pasted into the wrong field is described, not shown,
// and long values are cut short.
func shortQuote(s string) string {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if len(digits) >= 16 && strings.Trim(digits, "0123456789abcdefABCDEF") == "" {
		return fmt.Sprintf("(a %d-character hex string, not shown)", len(s))
	}
	const max = 24
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// Typed accessors: each reports a type mismatch at the value.

func (d *decoder) str(f string, v *Value) (string, bool) {
	s, ok := v.Str()
	if !ok {
		d.errorf(v.Pos, f, "want a string, got %s", v.Kind)
	}
	return s, ok
}

func (d *decoder) integer(f string, v *Value) (int64, bool) {
	i, ok := v.Int()
	if !ok {
		d.errorf(v.Pos, f, "want an integer, got %s", v.Kind)
	}
	return i, ok
}

func (d *decoder) boolean(f string, v *Value) (bool, bool) {
	b, ok := v.Bool()
	if !ok {
		d.errorf(v.Pos, f, "want a boolean (true or false), got %s", v.Kind)
	}
	return b, ok
}

// wrongKind reports that v is not what f wants ("a table"). When v is of
// kind slip, as when [sa] is written for [[sa]], fix says what to write.
func (d *decoder) wrongKind(f string, v *Value, want string, slip Kind, fix string) {
	hint := ""
	if v.Kind == slip {
		hint = " (" + fix + ")"
	}
	d.errorf(v.Pos, f, "want %s, got %s%s", want, v.Kind, hint)
}

// table returns the table of a section such as [gateway].
func (d *decoder) table(f string, v *Value) (*Table, bool) {
	t, ok := v.Table()
	if !ok {
		d.wrongKind(f, v, "a table", KindArray, fmt.Sprintf("write [%s], not [[%s]]", f, f))
	}
	return t, ok
}

// tableElem is one table of an array of tables.
type tableElem struct {
	field string // "sa[2]": 1-based index into the array
	pos   Pos    // where the table starts
	t     *Table
}

// arrayOfTables returns the tables of v, the value of an array of tables
// ([[field]] or field = [{...}, ...]). It reports v if it is not an array
// and skips, reporting them, the elements that are not tables.
func (d *decoder) arrayOfTables(field string, v *Value) ([]tableElem, bool) {
	elems, ok := v.Array()
	if !ok {
		d.wrongKind(field, v, "an array of tables", KindTable, fmt.Sprintf("write [[%s]], not [%s]", field, field))
		return nil, false
	}
	tables := make([]tableElem, 0, len(elems))
	for i, ev := range elems {
		f := elemPath(field, i)
		t, ok := ev.Table()
		if !ok {
			d.errorf(ev.Pos, f, "want a table, got %s", ev.Kind)
			continue
		}
		tables = append(tables, tableElem{field: f, pos: ev.Pos, t: t})
	}
	return tables, true
}

// Readers of checked values.

// parsed reads a string and converts it with parse, which returns what is
// wrong with the string, or "". (Go has no generic methods.)
func parsed[T any](d *decoder, f string, v *Value, parse func(string) (T, string)) (T, bool) {
	var zero T
	s, ok := d.str(f, v)
	if !ok {
		return zero, false
	}
	x, msg := parse(s)
	if msg != "" {
		d.errorf(v.Pos, f, "%s", msg)
		return zero, false
	}
	return x, true
}

// checked reads a string that check, which returns what is wrong with it or
// "", accepts.
func (d *decoder) checked(f string, v *Value, check func(string) string) (string, bool) {
	return parsed(d, f, v, func(s string) (string, string) { return s, check(s) })
}

// nonEmpty is a check for checked that rejects "" with msg.
func nonEmpty(msg string) func(string) string {
	return func(s string) string {
		if s == "" {
			return msg
		}
		return ""
	}
}

// name reads the name of an SA, a tunnel or a policy; empty is the message
// for "".
func (d *decoder) name(f string, v *Value, empty string) (string, bool) {
	return d.checked(f, v, func(s string) string { return checkName(s, empty) })
}

// intIn reads an integer in lo..hi. what names the value at the start of
// the message about one out of range ("SPI 255 out of range"), if at all;
// want says what is valid.
func (d *decoder) intIn(f string, v *Value, what string, lo, hi int64, want string) (int64, bool) {
	i, ok := d.integer(f, v)
	if ok && (i < lo || i > hi) {
		if what != "" {
			what += " "
		}
		d.errorf(v.Pos, f, "%s%d out of range (want %s)", what, i, want)
		return 0, false
	}
	return i, ok
}

// oneOf reads a string that must be one of valid; what names it. help says
// what is valid; when it is "", the message lists valid, and a value that
// differs from one of them in case only is told so.
func (d *decoder) oneOf(f string, v *Value, what string, valid []string, help string) (string, bool) {
	s, ok := d.str(f, v)
	if !ok {
		return "", false
	}
	if slices.Contains(valid, s) {
		return s, true
	}
	if help == "" {
		for _, w := range valid {
			if strings.EqualFold(w, s) {
				d.errorf(v.Pos, f, "unknown %s %s (values are lowercase: did you mean %s?)", what, shortQuote(s), w)
				return "", false
			}
		}
		help = strings.Join(valid, ", ")
	}
	d.errorf(v.Pos, f, "unknown %s %s (valid: %s)", what, shortQuote(s), help)
	return "", false
}

// udpPort reads a UDP port (an SA's sport or dport, a tunnel's peer_port),
// which only encap = "udp" takes. encapOK false says encap did not decode:
// the port is then only checked to be an integer. what and rule make the
// message about a port given with another encap: "what given with encap =
// "none" (rule only valid with encap = "udp")".
func (d *decoder) udpPort(f string, v *Value, encap Encap, encapOK bool, what, rule string) (uint16, bool) {
	i, ok := d.integer(f, v)
	switch {
	case !ok || !encapOK:
	case encap != EncapUDP:
		d.errorf(v.Pos, f, "%s given with encap = %q (%s only valid with encap = \"udp\")", what, encap, rule)
	case i < 1 || i > 65535:
		d.errorf(v.Pos, f, "port %d out of range (want 1..65535)", i)
	default:
		return uint16(i), true
	}
	return 0, false
}

// strList reads an array of strings, reporting each element that is not
// one. example shows the syntax, for the message about a bare string.
func (d *decoder) strList(f string, v *Value, example string) ([]*Value, bool) {
	elems, ok := v.Array()
	if !ok {
		d.wrongKind(f, v, "an array of strings", KindString, "write "+example)
		return nil, false
	}
	allOK := true
	for i, ev := range elems {
		if _, ok := d.str(elemPath(f, i), ev); !ok {
			allOK = false
		}
	}
	return elems, allOK
}

// prefixList reads an array of prefix strings with parse, and reports a
// prefix given twice as a duplicate what ("address", "prefix").
func (d *decoder) prefixList(f string, v *Value, example, what string, parse func(string) (netip.Prefix, string)) ([]netip.Prefix, bool) {
	elems, ok := d.strList(f, v, example)
	if !ok {
		return nil, false
	}
	out := make([]netip.Prefix, 0, len(elems))
	for i, ev := range elems {
		s, _ := ev.Str()
		p, msg := parse(s)
		if msg != "" {
			d.errorf(ev.Pos, elemPath(f, i), "%s", msg)
			ok = false
			continue
		}
		out = append(out, p)
	}
	if !ok {
		return nil, false
	}
	// Every element parsed: out[i] is elems[i].
	for i, p := range out {
		if j := slices.Index(out[:i], p); j >= 0 {
			d.errorf(elems[i].Pos, elemPath(f, i), "duplicate %s %s (also %s, line %d)", what, p, elemPath(f, j), elems[j].Pos.Line)
		}
	}
	return out, true
}
