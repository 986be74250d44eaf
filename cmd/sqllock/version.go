package main

import (
	"runtime"
	"runtime/debug"
)

// libraryPath is the module path of the sqllock library the command is
// built with.
const libraryPath = "github.com/sqllock/sqllock"

// moduleVersion is the version of the module sqllock was built from, as
// the build recorded it (bi may be nil): v1.2.3 after go install …@v1.2.3;
// for a build of a clone, "(devel, commit 0123456789ab of TIME)", with
// ", modified" when its tree had changes, if the build recorded its commit;
// else "(devel)".
func moduleVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if at != "" {
		at = " of " + at
	}
	return "(devel, commit " + rev + at + modified + ")"
}

// buildInfo is the binary's build information, nil if it has none.
func buildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// libraryVersion is the version of the sqllock library module bi says the
// binary was built with: the version of its replacement if the build
// replaced it, "(devel)" if that version is unknown (a replacement by a
// directory, a workspace module) or bi lists no such module.
func libraryVersion(bi *debug.BuildInfo) string {
	for _, m := range bi.Deps {
		if m.Path != libraryPath {
			continue
		}
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Version != "" {
			return m.Version
		}
		break
	}
	return "(devel)"
}

// version is what sqllock --version prints after "sqllock": the module's
// version, the library's in parentheses, and the Go release that built it.
func version() string {
	bi, lib := buildInfo(), "(devel)"
	if bi != nil {
		lib = libraryVersion(bi)
	}
	return moduleVersion(bi) + " (library " + lib + ") " + runtime.Version()
}
