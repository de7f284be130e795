WITH chart AS (SELECT '{}'::text[] AS labels, '{}'::text[] AS scopes, true AS running, '' AS pods)
SELECT count(*) FROM tasks t JOIN plans p ON p.id = t.plan_id CROSS JOIN chart
WHERE (chart.running AND t.status IN ('CLAIMED', 'IN_PROGRESS')
       AND EXISTS (SELECT 1 FROM workers w WHERE w.id = t.claimed_by AND starts_with(w.hostname, chart.pods)))
   OR (t.status = 'PENDING' AND NOT t.waiting
       AND NOT EXISTS (SELECT 1 FROM fleet WHERE paused)
       AND (t.not_before IS NULL OR t.not_before <= now())
       AND (t.labels = '{}' OR t.labels <@ chart.labels)
       AND p.status = 'ACTIVE'
       AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
       AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
       AND (chart.scopes = '{}' OR ('plan:' || p.id) = ANY(chart.scopes)
            OR ('installation:' || p.installation_id::text) = ANY(chart.scopes)
            OR ('repo:' || lower(p.repo)) = ANY(chart.scopes))
       AND NOT EXISTS (
         SELECT 1 FROM unnest(t.dependencies) AS d(dep)
         LEFT JOIN tasks x ON x.plan_id = t.plan_id AND x.id = d.dep
         WHERE x.status IS NULL OR x.status NOT IN ('DONE', 'SKIPPED')))
