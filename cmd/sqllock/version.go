package main

import (
	"runtime"
	"runtime/debug"
)

// libraryPath is the module path of the sqllock library the command is
// built with.
const libraryPath = "github.com/sqllock/sqllock"

// moduleVersion is the version of the module sqllock was built from, as
// the build recorded it: v1.2.3 after go install …@v1.2.3, a pseudo-version
// in a clone with its history, else "(devel)".
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
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
	lib := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		lib = libraryVersion(bi)
	}
	return moduleVersion() + " (library " + lib + ") " + runtime.Version()
}
