//go:build race

package cmd

// raceEnabled: the race detector multiplies a process's memory, so RSS
// bounds are logged, not checked.
const raceEnabled = true
