//go:build race

package handover_test

const raceEnabled = true
