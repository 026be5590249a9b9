package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Pos is a position in a configuration file. Line and Col are 1-based; Col
// counts bytes, as go-toml and the Go toolchain do. A zero Line means the
// position is unknown.
type Pos struct {
	File      string
	Line, Col int
}

// String formats the position as FILE:LINE:COL, leaving out the parts that
// are unknown.
func (p Pos) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(p.Line))
		if p.Col > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(p.Col))
		}
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

// Error is a configuration error: it names the file, line, column and field,
// and says what would be valid.
//
// Messages never contain key material: values of enc_key and auth_key are
// described by their length only.
type Error struct {
	Pos Pos
	// Field is the path of the offending key, with 1-based indexes into
	// arrays of tables, e.g. "sa[2].enc_key". It is empty for TOML syntax
	// errors, which are not about one field.
	Field string
	Msg   string
}

// Error returns "FILE:LINE:COL: FIELD: MSG".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Pos.String())
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every error found in a document, in file order.
type Errors []*Error

// Error joins the messages of the errors with newlines.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As and errors.Is see the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Err returns es as an error, or nil when es is empty, so that a nil Errors
// never becomes a non-nil error interface.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Sort puts the errors in file order (by file, line, then column), keeping
// the order in which they were found for errors at the same position.
func (es Errors) Sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
		)
	})
}
