//go:build !race

package wordpiece

const raceEnabled = false
