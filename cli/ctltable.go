package cli

// The tables the client commands print. By default a table fits
// ctlWidth columns: the columns marked wide are left out, and the
// columns that may be cut (names, lists, drop reasons) are shortened,
// the widest first, with "…" where they lose text. With -o wide every
// column is shown whole; --json has everything.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ctlWidth is the width the tables fit unless -o wide.
const ctlWidth = 100

// ctlCol is a column of a table.
type ctlCol struct {
	name string
	wide bool // shown only with -o wide
	cut  bool // may be shortened to fit ctlWidth
	min  int  // a cut column keeps at least this width (and its header's, and 4)
}

func col(name string) ctlCol     { return ctlCol{name: name} }
func cutCol(name string) ctlCol  { return ctlCol{name: name, cut: true} }
func wideCol(name string) ctlCol { return ctlCol{name: name, wide: true} }

// cutMin is a column that may be cut, to no less than min.
func cutMin(name string, min int) ctlCol { return ctlCol{name: name, cut: true, min: min} }

// ctlTable collects rows and writes them as aligned columns in flush.
type ctlTable struct {
	w    io.Writer
	wide bool
	cols []ctlCol
	rows [][]string
}

// newTable starts a table of cols on w; wide shows every column whole.
func newTable(w io.Writer, wide bool, cols ...ctlCol) *ctlTable {
	return &ctlTable{w: w, wide: wide, cols: cols}
}

// row adds a row: one cell per column, wide ones included.
func (t *ctlTable) row(cells ...string) {
	if len(cells) != len(t.cols) {
		panic(fmt.Sprintf("cli: table row of %d cells for %d columns", len(cells), len(t.cols)))
	}
	t.rows = append(t.rows, cells)
}

// flush writes the header and the rows.
func (t *ctlTable) flush() error {
	var shown []int
	for i, c := range t.cols {
		if t.wide || !c.wide {
			shown = append(shown, i)
		}
	}
	width := make([]int, len(shown))
	for j, i := range shown {
		width[j] = utf8.RuneCountInString(t.cols[i].name)
		for _, r := range t.rows {
			width[j] = max(width[j], utf8.RuneCountInString(r[i]))
		}
	}
	if !t.wide {
		t.fit(shown, width)
	}
	var b, l strings.Builder
	line := func(cell func(i int) string) {
		l.Reset()
		for j, i := range shown {
			s := cell(i)
			if n := utf8.RuneCountInString(s); n > width[j] {
				s = string([]rune(s)[:width[j]-1]) + "…"
			}
			l.WriteString(s)
			if j < len(shown)-1 {
				l.WriteString(strings.Repeat(" ", width[j]-utf8.RuneCountInString(s)+2))
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(func(i int) string { return t.cols[i].name })
	for _, r := range t.rows {
		line(func(i int) string { return r[i] })
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}

// fit shortens the columns that may be cut, the widest first, until the
// table is ctlWidth wide or none can be cut further: a column keeps at
// least its header's width, its min and four.
func (t *ctlTable) fit(shown, width []int) {
	total := 2 * (len(shown) - 1)
	for _, w := range width {
		total += w
	}
	for total > ctlWidth {
		best := -1
		for j, i := range shown {
			c := t.cols[i]
			if c.cut && width[j] > max(4, c.min, utf8.RuneCountInString(c.name)) && (best < 0 || width[j] > width[best]) {
				best = j
			}
		}
		if best < 0 {
			return
		}
		width[best]--
		total--
	}
}

// ctlRate formats a rate per second with an SI prefix: "0", "12",
// "999", "1.2k", "34.5M". It is "-" for a counter that went back (a new
// SA under an old SPI, a restarted gateway).
func ctlRate(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	const units = "kMGTPE"
	if v < 999.5 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	u := -1
	for v >= 999.5 && u < len(units)-1 {
		v /= 1000
		u++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + units[u:u+1]
}
