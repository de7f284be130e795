SELECT count(*) FROM tasks t JOIN plans p ON p.id = t.plan_id
WHERE t.status IN ('CLAIMED', 'IN_PROGRESS')
   OR (t.status = 'PENDING'
       AND (t.not_before IS NULL OR t.not_before <= now())
       AND p.status = 'ACTIVE'
       AND (p.budget_usd IS NULL OR p.spent_usd < p.budget_usd)
       AND (NOT p.strict OR t.gate_verdict <> 'REJECT')
       AND NOT EXISTS (
         SELECT 1 FROM unnest(t.dependencies) AS d(dep)
         LEFT JOIN tasks x ON x.plan_id = t.plan_id AND x.id = d.dep
         WHERE x.status IS NULL OR x.status NOT IN ('DONE', 'SKIPPED')))
