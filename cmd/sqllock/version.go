package main

import (
	"runtime"
	"runtime/debug"
)

// moduleVersion is the version of the module sqllock was built from, as
// the build recorded it: v1.2.3 after go install …@v1.2.3, a pseudo-version
// in a clone with its history, else "(devel)".
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// version is what sqllock --version prints after "sqllock": the module's
// version and the Go release that built it.
func version() string { return moduleVersion() + " " + runtime.Version() }
