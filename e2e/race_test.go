//go:build race

package e2e

// raceEnabled tells the figures logged by the tests apart: the race
// detector slows everything down several times.
const raceEnabled = true
