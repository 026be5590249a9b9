package config

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Kind is the TOML type of a Value.
type Kind uint8

// The TOML value types.
const (
	KindInvalid Kind = iota
	KindString
	KindInteger
	KindFloat
	KindBool
	KindDateTime      // offset date-time
	KindLocalDateTime // date-time without an offset
	KindLocalDate
	KindLocalTime
	KindArray
	KindTable // a [table], an element of an [[array of tables]], or an inline table
)

var kindNames = [...]string{
	KindInvalid:       "invalid value",
	KindString:        "string",
	KindInteger:       "integer",
	KindFloat:         "float",
	KindBool:          "boolean",
	KindDateTime:      "date-time",
	KindLocalDateTime: "local date-time",
	KindLocalDate:     "local date",
	KindLocalTime:     "local time",
	KindArray:         "array",
	KindTable:         "table",
}

// String returns the TOML name of the type ("string", "integer", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Document is a TOML document decoded into a tree that remembers where every
// key and value is, so that the code that interprets it (the SA file, the
// gateway configuration) can report errors with exact positions.
type Document struct {
	File string
	Root *Table
}

// Table is a TOML table: the root, a [table], an element of an [[array of
// tables]], an inline table, or a table defined implicitly by a dotted key.
type Table struct {
	// Pos is where the table starts: the '[' of its header, the '{' of an
	// inline table, the key that created an implicit table, or 1:1 for the
	// root.
	Pos     Pos
	entries []*Entry
	index   map[string]int
}

// Entry is one key of a table and its value.
type Entry struct {
	Key    string // decoded key (case-sensitive, quotes and escapes removed)
	KeyPos Pos
	Value  *Value
}

// Value is a TOML value.
type Value struct {
	Kind Kind
	Pos  Pos // where the value starts

	str   string // decoded text of a string; source text of floats and dates
	num   int64
	flag  bool
	array []*Value
	table *Table
}

// Entries returns the table's keys in the order they first appear in the
// document.
func (t *Table) Entries() []*Entry { return t.entries }

// Lookup returns the entry for key, or nil.
func (t *Table) Lookup(key string) *Entry {
	if i, ok := t.index[key]; ok {
		return t.entries[i]
	}
	return nil
}

func (t *Table) add(key string, keyPos Pos, v *Value) *Entry {
	if t.index == nil {
		t.index = make(map[string]int)
	}
	e := &Entry{Key: key, KeyPos: keyPos, Value: v}
	t.index[key] = len(t.entries)
	t.entries = append(t.entries, e)
	return e
}

// Str returns the decoded text of a string value.
func (v *Value) Str() (string, bool) { return v.str, v.Kind == KindString }

// Int returns an integer value.
func (v *Value) Int() (int64, bool) { return v.num, v.Kind == KindInteger }

// Bool returns a boolean value.
func (v *Value) Bool() (bool, bool) { return v.flag, v.Kind == KindBool }

// Array returns the elements of an array value, including an array of
// tables.
func (v *Value) Array() ([]*Value, bool) { return v.array, v.Kind == KindArray }

// Table returns the table of a table value.
func (v *Value) Table() (*Table, bool) { return v.table, v.Kind == KindTable }

// Source returns the source text of a float or date/time value, as written.
func (v *Value) Source() string { return v.str }

// ParseDocument parses TOML data. filename is used in positions only. Syntax
// errors and TOML semantic errors (a key defined twice, a table redefined)
// are returned as Errors holding one *Error with the line and column.
func ParseDocument(filename string, data []byte) (*Document, error) {
	// A UTF-8 byte-order mark, as some Windows editors write, is not part
	// of the document; editors do not show it, so columns count without it.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	// go-toml's decoder checks everything TOML requires: syntax, duplicate
	// keys, table and array-of-tables conflicts, valid dates and integer
	// ranges. The unstable parser used below to get positions checks only
	// the syntax, so run the full decoder first and build the positioned
	// tree only from documents it accepts.
	var generic map[string]any
	if err := toml.Unmarshal(data, &generic); err != nil {
		e := &Error{Pos: Pos{File: filename}, Msg: "invalid TOML: " + strings.TrimPrefix(err.Error(), "toml: ")}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			e.Pos.Line, e.Pos.Col = de.Position()
		}
		return nil, Errors{e}
	}

	b := &builder{file: filename, data: data, lines: lineStarts(data)}
	root, err := b.document()
	if err != nil {
		return nil, Errors{err}
	}
	return &Document{File: filename, Root: root}, nil
}

// builder turns the unstable parser's AST into the positioned tree.
type builder struct {
	file  string
	data  []byte
	lines []int // offset of the start of each line
	p     unstable.Parser
}

func lineStarts(data []byte) []int {
	lines := []int{0}
	for i, c := range data {
		if c == '\n' {
			lines = append(lines, i+1)
		}
	}
	return lines
}

func (b *builder) pos(offset int) Pos {
	i := sort.Search(len(b.lines), func(i int) bool { return b.lines[i] > offset }) - 1
	if i < 0 {
		i = 0
	}
	return Pos{File: b.file, Line: i + 1, Col: offset - b.lines[i] + 1}
}

func (b *builder) rangePos(r unstable.Range) Pos { return b.pos(int(r.Offset)) }

func (b *builder) errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (b *builder) document() (*Table, *Error) {
	b.p.Reset(b.data)
	root := &Table{Pos: Pos{File: b.file, Line: 1, Col: 1}}
	cur := root
	for b.p.NextExpression() {
		expr := b.p.Expression()
		var err *Error
		switch expr.Kind {
		case unstable.KeyValue:
			err = b.keyValue(cur, expr)
		case unstable.Table, unstable.ArrayTable:
			cur, err = b.header(root, expr)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := b.p.Error(); err != nil {
		e := &Error{Pos: Pos{File: b.file}, Msg: "invalid TOML: " + err.Error()}
		var perr *unstable.ParserError
		if errors.As(err, &perr) {
			off := cap(b.data) - cap(perr.Highlight)
			if off >= 0 && off <= len(b.data) {
				e.Pos = b.pos(off)
			}
		}
		return nil, e
	}
	return root, nil
}

type keyPart struct {
	name string
	pos  Pos
	end  int // offset just past the key part in the source
}

func (b *builder) keyParts(it unstable.Iterator) []keyPart {
	var parts []keyPart
	for it.Next() {
		n := it.Node()
		parts = append(parts, keyPart{
			name: string(n.Data),
			pos:  b.rangePos(n.Raw),
			end:  int(n.Raw.Offset + n.Raw.Length),
		})
	}
	return parts
}

// header handles [a.b] and [[a.b]] and returns the table that the following
// key-values go into.
func (b *builder) header(root *Table, expr *unstable.Node) (*Table, *Error) {
	keys := b.keyParts(expr.Key())
	if len(keys) == 0 {
		return nil, b.errorf(Pos{File: b.file}, "invalid TOML: table header without a key")
	}
	// The header node carries no range: find its '[' by walking back from
	// the first key over blanks and brackets.
	off := int(expr.Child().Raw.Offset)
	for off > 0 && (b.data[off-1] == ' ' || b.data[off-1] == '\t' || b.data[off-1] == '[') {
		off--
	}
	hdr := b.pos(off)

	t := root
	for _, k := range keys[:len(keys)-1] {
		var err *Error
		if t, err = b.descend(t, k); err != nil {
			return nil, err
		}
	}
	last := keys[len(keys)-1]
	e := t.Lookup(last.name)
	if expr.Kind == unstable.ArrayTable {
		if e == nil {
			e = t.add(last.name, last.pos, &Value{Kind: KindArray, Pos: hdr})
		}
		if e.Value.Kind != KindArray {
			return nil, b.errorf(last.pos, "invalid TOML: key %s is not an array of tables", quoteKey(last.name))
		}
		nt := &Table{Pos: hdr}
		e.Value.array = append(e.Value.array, &Value{Kind: KindTable, Pos: hdr, table: nt})
		return nt, nil
	}
	if e == nil {
		nt := &Table{Pos: hdr}
		t.add(last.name, last.pos, &Value{Kind: KindTable, Pos: hdr, table: nt})
		return nt, nil
	}
	if e.Value.Kind != KindTable {
		return nil, b.errorf(last.pos, "invalid TOML: key %s is not a table", quoteKey(last.name))
	}
	// The table was created implicitly by an earlier header such as [a.b];
	// this header defines it, so it starts here.
	e.KeyPos, e.Value.Pos, e.Value.table.Pos = last.pos, hdr, hdr
	return e.Value.table, nil
}

// descend returns the table named by key k inside t, creating it if needed.
// For an array of tables it is the last element, as TOML specifies.
func (b *builder) descend(t *Table, k keyPart) (*Table, *Error) {
	e := t.Lookup(k.name)
	if e == nil {
		nt := &Table{Pos: k.pos}
		t.add(k.name, k.pos, &Value{Kind: KindTable, Pos: k.pos, table: nt})
		return nt, nil
	}
	switch v := e.Value; {
	case v.Kind == KindTable:
		return v.table, nil
	case v.Kind == KindArray && len(v.array) > 0 && v.array[len(v.array)-1].Kind == KindTable:
		return v.array[len(v.array)-1].table, nil
	}
	return nil, b.errorf(k.pos, "invalid TOML: key %s is not a table", quoteKey(k.name))
}

// keyValue adds `a.b = value` to t.
func (b *builder) keyValue(t *Table, expr *unstable.Node) *Error {
	keys := b.keyParts(expr.Key())
	if len(keys) == 0 {
		return b.errorf(Pos{File: b.file}, "invalid TOML: key-value without a key")
	}
	for _, k := range keys[:len(keys)-1] {
		var err *Error
		if t, err = b.descend(t, k); err != nil {
			return err
		}
	}
	last := keys[len(keys)-1]
	if t.Lookup(last.name) != nil {
		return b.errorf(last.pos, "invalid TOML: key %s is already defined", quoteKey(last.name))
	}
	// Arrays carry no range: the value starts after the '=' that follows
	// the key.
	off := last.end
	for off < len(b.data) && (b.data[off] == ' ' || b.data[off] == '\t' || b.data[off] == '=') {
		off++
	}
	v, err := b.value(expr.Value(), b.pos(off))
	if err != nil {
		return err
	}
	t.add(last.name, last.pos, v)
	return nil
}

// value converts a value node. at is where the value starts, for the nodes
// that carry no range.
func (b *builder) value(n *unstable.Node, at Pos) (*Value, *Error) {
	if n.Raw.Length > 0 {
		at = b.rangePos(n.Raw)
	}
	v := &Value{Pos: at}
	switch n.Kind {
	case unstable.String:
		v.Kind, v.str = KindString, string(n.Data)
	case unstable.Integer:
		i, err := parseInteger(string(n.Data))
		if err != nil {
			return nil, b.errorf(at, "invalid TOML: %v", err)
		}
		v.Kind, v.num = KindInteger, i
	case unstable.Float:
		v.Kind, v.str = KindFloat, string(n.Data)
	case unstable.Bool:
		v.Kind, v.flag = KindBool, string(n.Data) == "true"
	case unstable.DateTime:
		v.Kind, v.str = KindDateTime, string(n.Data)
	case unstable.LocalDateTime:
		v.Kind, v.str = KindLocalDateTime, string(n.Data)
	case unstable.LocalDate:
		v.Kind, v.str = KindLocalDate, string(n.Data)
	case unstable.LocalTime:
		v.Kind, v.str = KindLocalTime, string(n.Data)
	case unstable.Array:
		v.Kind = KindArray
		it := n.Children()
		for it.Next() {
			c := it.Node()
			if c.Kind == unstable.Comment {
				continue
			}
			cv, err := b.value(c, at)
			if err != nil {
				return nil, err
			}
			v.array = append(v.array, cv)
		}
	case unstable.InlineTable:
		v.Kind, v.table = KindTable, &Table{Pos: at}
		it := n.Children()
		for it.Next() {
			c := it.Node()
			if c.Kind != unstable.KeyValue {
				continue
			}
			if err := b.keyValue(v.table, c); err != nil {
				return nil, err
			}
		}
	default:
		return nil, b.errorf(at, "invalid TOML: unexpected %s node", n.Kind)
	}
	return v, nil
}

// parseInteger parses a TOML integer as the parser delimited it: decimal with
// an optional sign, or 0x, 0o, 0b with no sign, with single underscores
// between digits. Go's base-0 syntax accepts exactly these forms (leading
// zeros having been rejected by the parser).
func parseInteger(s string) (int64, error) {
	i, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("integer %s does not fit in 64 bits", s)
		}
		return 0, fmt.Errorf("malformed integer %q", s)
	}
	return i, nil
}

// quoteKey renders a key for a message or a field path: bare if TOML allows
// it bare, quoted otherwise.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return strconv.Quote(k)
		}
	}
	return k
}

// fieldPath appends key to a field path ("sa[1]" + "spi" = "sa[1].spi").
func fieldPath(prefix, key string) string {
	if prefix == "" {
		return quoteKey(key)
	}
	return prefix + "." + quoteKey(key)
}

// elemPath is the field path of element i (0-based) of an array, with the
// 1-based index messages use ("sa", 1 = "sa[2]").
func elemPath(field string, i int) string {
	return field + "[" + strconv.Itoa(i+1) + "]"
}
