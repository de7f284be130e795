package queue

// The statements whose generic plans the tests check (genericPlan), and the settings of
// the hot batches they run in.
const (
	StoreTailsSQL = storeTailsSQL
	HotSettings   = hotSettings
	WalkStart     = walkStart
)

var ClaimAnySQL = claimAnySQL
