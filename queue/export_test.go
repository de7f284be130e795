package queue

// The statements whose generic plans the tests check (genericPlan), and the settings of
// the hot batches they run in.
const (
	StoreTailsSQL = storeTailsSQL
	HotSettings   = hotSettings
	WalkStart     = walkStart
)

var ClaimAnySQL = claimAnySQL

const MarkChangedSQL = markChangedSQL

// CompletionBatch says whether a batch of plan planID's completions runs, and how many
// completions wait for it.
func (s *Store) CompletionBatch(planID string) (running bool, waiting int) {
	s.completions.mu.Lock()
	defer s.completions.mu.Unlock()
	q, running := s.completions.waiting[planID]
	return running, len(q)
}

// InsertTasksSQL is the statement of an import's batch of tasks.
var InsertTasksSQL = insertTasksSQL
