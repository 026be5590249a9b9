// Package buildinfo says what a sluice binary is: its version, the commit
// it was built from, the Go toolchain and build tags, and the crypto
// engines linked in. `sluice version` prints it and the control socket's
// metrics export it as sluice_build_info.
package buildinfo

import (
	"runtime/debug"
	"strings"

	"github.com/sluicegw/sluice/cryptodev"
)

// Version is the release version. Release builds set it with
// -ldflags "-X github.com/sluicegw/sluice/internal/buildinfo.Version=...";
// otherwise it is the module's version as Go recorded it (a pseudo-version
// for `go install module@commit`), or "devel".
var Version = ""

// Info describes the running binary.
type Info struct {
	Version   string   `json:"version"`
	Commit    string   `json:"commit"`   // "" when the build recorded none
	Modified  bool     `json:"modified"` // the work tree had changes
	Time      string   `json:"time"`     // of the commit, RFC 3339
	GoVersion string   `json:"go"`
	Tags      string   `json:"tags"`    // -tags, comma-separated
	CGO       bool     `json:"cgo"`     // CGO_ENABLED
	Engines   []string `json:"engines"` // registered, highest priority first
}

// Get reads the binary's build information. Engines are those registered
// when it is called, so call it after package initialisation.
func Get() Info {
	in := Info{Version: Version, Engines: cryptodev.Engines()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		in.GoVersion = bi.GoVersion
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			case "vcs.time":
				in.Time = s.Value
			case "-tags":
				in.Tags = s.Value
			case "CGO_ENABLED":
				in.CGO = s.Value == "1"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	return in
}

// String is the one-line form: "sluice VERSION (COMMIT[+dirty], GO, tags
// T, engines E)".
func (in Info) String() string {
	var b strings.Builder
	b.WriteString("sluice ")
	b.WriteString(in.Version)
	b.WriteString(" (")
	switch {
	case in.Commit == "":
		b.WriteString("commit unknown")
	case len(in.Commit) > 12:
		b.WriteString("commit " + in.Commit[:12])
	default:
		b.WriteString("commit " + in.Commit)
	}
	if in.Modified {
		b.WriteString("+dirty")
	}
	if in.GoVersion != "" {
		b.WriteString(", " + in.GoVersion)
	}
	if in.Tags != "" {
		b.WriteString(", tags " + in.Tags)
	}
	b.WriteString(", engines " + strings.Join(in.Engines, ","))
	b.WriteString(")")
	return b.String()
}
