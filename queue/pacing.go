package queue

import (
	"context"
	"fmt"
)

// InstallationLivePlans counts the live (ACTIVE or PAUSED) plans of the GitHub
// installation of plan planID, the plan included; 0 when the plan has no installation.
// The mirror paces an installation's writes by it (GitHub's limits are per
// installation). One probe of plans_live_installation (migration 0019).
func (s *Store) InstallationLivePlans(ctx context.Context, planID string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM plans o
		WHERE o.status IN ('ACTIVE', 'PAUSED')
		  AND o.installation_id = (SELECT installation_id FROM plans WHERE id = $1)`, planID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the live plans of plan %s's installation: %w", planID, err)
	}
	return n, nil
}
