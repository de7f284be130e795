package queue

// StoreTailsSQL and HotSettings are storeTailsSQL and hotSettings, for the test of the
// statement's plan.
const (
	StoreTailsSQL = storeTailsSQL
	HotSettings   = hotSettings
)
