//go:build race

package wordpiece

// raceEnabled: the race detector makes sync.Pool drop buffers at random, so
// allocation counts mean nothing.
const raceEnabled = true
