-- One job of the common plan shape (`[wf:fanout]`: a Conductor plan, two parallel steps and a
-- combine step; 4 model calls), as the production store sees it: the 33 statements in the 12
-- transactions that benchmarks/step_cost.py counts on PostgreSQL, in the engine's order, with the
-- same WHERE clauses, CTEs, locks and row sizes (a ~2.8 KB Conductor prompt, short outputs).
-- One pgbench "transaction" is this whole script: pgbench's tps is jobs/s.
-- Not here: the submitting client's polls, the feeder's admission pass, scoring, webhooks, beat.
-- Run by benchmarks/pgbench/run.py against a scratch database migrated to the current schema,
-- with `-M prepared` (as psycopg runs repeated statements): variables travel as bound parameters.

-- submit: the job row (Service.submit)
BEGIN;
INSERT INTO jobs (id, priority, status, problem, samples, options, open_chains, model_calls, prompt_tokens,
  completion_tokens, cost_usd, cache_hits, cached_tokens, saved_usd, sends, created_at)
VALUES (md5(random()::text || clock_timestamp()::text), 5, 'queued', '{"question": "fanout q"}'::json, 1,
  '{}'::json, 0, 0, 0, 0, 0.0, 0, 0, 0.0, 0, now())
RETURNING id AS job \gset
COMMIT;

-- start: the job running, its chain and its plan round
BEGIN;
UPDATE jobs SET status = 'running', open_chains = jobs.samples, sent_at = NULL, sends = 0, started_at = now()
WHERE jobs.id = ANY (ARRAY[:job]::varchar(64)[]) AND jobs.status = 'queued'
RETURNING jobs.id, jobs.problem, jobs.samples, jobs.options;
INSERT INTO chains (job_id, sample_index, depth, question, status, rounds_used, created_at)
VALUES (:job, 0, 0, 'fanout q', 'running', 1, now()) RETURNING chains.id AS chain \gset
INSERT INTO rounds (chain_id, job_id, round_index, kind, status, workflow, n_steps, steps_done, prompt_tokens,
  completion_tokens, cost_usd, attempts, sends, created_at)
VALUES (:chain, :job, 0, 'plan', 'planning', NULL, 0, 0, 0, 0, 0.0, 0, 0, now()) RETURNING rounds.id AS round \gset
COMMIT;

-- plan: lease the round, reserve the Conductor call
BEGIN;
UPDATE rounds SET attempts = rounds.attempts + 1, lease_until = now() + interval '11 minutes' FROM chains, jobs
WHERE rounds.id = :round AND rounds.status = 'planning' AND (rounds.lease_until IS NULL OR rounds.lease_until < now())
  AND chains.id = rounds.chain_id AND jobs.id = rounds.job_id
RETURNING rounds.job_id, rounds.kind, rounds.chain_id, rounds.round_index, chains.question, jobs.options;
UPDATE jobs SET model_calls = jobs.model_calls + 1
WHERE jobs.id = :job AND jobs.model_calls < 40 AND (jobs.budget_tokens IS NULL OR jobs.prompt_tokens + jobs.completion_tokens < jobs.budget_tokens)
  AND (jobs.budget_usd IS NULL OR jobs.cost_usd < jobs.budget_usd);
COMMIT;

-- plan: record the Conductor's completion, its usage, the parsed workflow and its three steps
BEGIN;
SELECT rounds.* FROM rounds WHERE rounds.id = :round FOR NO KEY UPDATE;
UPDATE rounds SET prompt_messages = json_build_array(json_build_object('role', 'system', 'content', repeat('p', 2700))),
  completion_text = 'Let me plan. model_id = [0, 1, 0] subtasks = ["part A", "part B", "combine"] access_list = [[], [], [0, 1]]',
  completion_token_ids = '[294, 211, 2285, 62, 184, 94, 1032, 77, 31, 9, 4, 12, 88, 73, 190, 14, 52, 6]'::json,
  completion_logprobs = '[-0.1, -0.2, -0.4, -0.7, -0.3, -0.1, -0.2, -0.4, -0.7, -0.3, -0.1, -0.2, -0.4, -0.7, -0.3, -0.1, -0.2, -0.4]'::json,
  conductor_model = 'openai/scripted-conductor', policy_version = 'base', sampling = '{"temperature": 0.3}'::json,
  prompt_tokens = 10, completion_tokens = 18, latency_s = 0.001, lease_until = NULL
WHERE rounds.id = :round;
UPDATE jobs SET prompt_tokens = jobs.prompt_tokens + 10, completion_tokens = jobs.completion_tokens + 18,
  cost_usd = jobs.cost_usd + 0.0, cache_hits = jobs.cache_hits + 0, cached_tokens = jobs.cached_tokens + 0,
  saved_usd = jobs.saved_usd + 0.0
WHERE jobs.id = :job;
SELECT chains.* FROM chains WHERE chains.id = :chain;
SELECT jobs.* FROM jobs WHERE jobs.id = :job;
UPDATE rounds SET status = 'running', parse_status = 'ok',
  workflow = '{"model_id": [0, 1, 0], "subtasks": ["part A", "part B", "combine"], "access_list": [[], [], [0, 1]]}'::json,
  n_steps = 3
WHERE rounds.id = :round;
WITH ins AS (
  INSERT INTO steps (round_id, job_id, step_index, worker_index, worker_name, subtask, access, dependencies, pending_deps,
    status, prompt_tokens, completion_tokens, cost_usd, attempts, ready_at, sends)
  VALUES (:round, :job, 0, 0, 'alpha', 'part A', '[]'::json, '[]'::json, 0, 'ready', 0, 0, 0.0, 0, now(), 0),
         (:round, :job, 1, 1, 'beta', 'part B', '[]'::json, '[]'::json, 0, 'ready', 0, 0, 0.0, 0, now(), 0),
         (:round, :job, 2, 0, 'alpha', 'combine', '[0, 1]'::json, '[0, 1]'::json, 2, 'pending', 0, 0, 0.0, 0, NULL, 0)
  RETURNING steps.id, steps.step_index)
SELECT max(id) FILTER (WHERE step_index = 0) AS s0, max(id) FILTER (WHERE step_index = 1) AS s1,
       max(id) FILTER (WHERE step_index = 2) AS s2 FROM ins \gset
COMMIT;

-- each of the two parallel steps: lease it and reserve its call (one CTE); then complete it and
-- count it on the round (one CTE), release its successor, add its usage to the job
BEGIN;
WITH leased AS (UPDATE steps SET status = 'running', attempts = steps.attempts + 1, lease_holder = 'pgbench',
    lease_until = now() + interval '11 minutes', started_at = now() FROM rounds, chains
  WHERE steps.id = :s0 AND (steps.status = 'ready' OR steps.status = 'running' AND steps.lease_until < now())
    AND rounds.id = steps.round_id AND chains.id = rounds.chain_id
  RETURNING steps.round_id, steps.job_id, steps.step_index, steps.worker_index, steps.worker_name, steps.subtask,
    steps.access, steps.dependencies, rounds.status AS round_status, rounds.kind AS round_kind, rounds.chain_id,
    rounds.round_index, rounds.n_steps, chains.depth, chains.question),
reserved AS (UPDATE jobs SET model_calls = jobs.model_calls + 1 FROM leased
  WHERE jobs.id = leased.job_id AND jobs.model_calls < 40
    AND (jobs.budget_tokens IS NULL OR jobs.prompt_tokens + jobs.completion_tokens < jobs.budget_tokens)
    AND (jobs.budget_usd IS NULL OR jobs.cost_usd < jobs.budget_usd) AND leased.round_status = 'running'
    AND NOT (leased.worker_index = -1 AND leased.depth < 2) RETURNING jobs.id)
SELECT leased.*, EXISTS (SELECT reserved.id FROM reserved) AS reserved FROM leased;
COMMIT;
BEGIN;
WITH leased AS (UPDATE steps SET status = 'running', attempts = steps.attempts + 1, lease_holder = 'pgbench',
    lease_until = now() + interval '11 minutes', started_at = now() FROM rounds, chains
  WHERE steps.id = :s1 AND (steps.status = 'ready' OR steps.status = 'running' AND steps.lease_until < now())
    AND rounds.id = steps.round_id AND chains.id = rounds.chain_id
  RETURNING steps.round_id, steps.job_id, steps.step_index, steps.worker_index, steps.worker_name, steps.subtask,
    steps.access, steps.dependencies, rounds.status AS round_status, rounds.kind AS round_kind, rounds.chain_id,
    rounds.round_index, rounds.n_steps, chains.depth, chains.question),
reserved AS (UPDATE jobs SET model_calls = jobs.model_calls + 1 FROM leased
  WHERE jobs.id = leased.job_id AND jobs.model_calls < 40
    AND (jobs.budget_tokens IS NULL OR jobs.prompt_tokens + jobs.completion_tokens < jobs.budget_tokens)
    AND (jobs.budget_usd IS NULL OR jobs.cost_usd < jobs.budget_usd) AND leased.round_status = 'running'
    AND NOT (leased.worker_index = -1 AND leased.depth < 2) RETURNING jobs.id)
SELECT leased.*, EXISTS (SELECT reserved.id FROM reserved) AS reserved FROM leased;
COMMIT;
BEGIN;
WITH done AS (UPDATE steps SET status = 'done', output = 'alpha did <part A>', model = 'openai/scripted-worker-alpha',
    prompt_tokens = 10, completion_tokens = 6, cost_usd = 0.0, latency_s = 0.001, lease_until = NULL, finished_at = now()
  WHERE steps.id = :s0 AND steps.status IN ('running', 'delegated') RETURNING steps.round_id, steps.step_index, steps.job_id),
counted AS (UPDATE rounds SET steps_done = rounds.steps_done + 1 FROM done
  WHERE rounds.id = done.round_id AND rounds.status = 'running' RETURNING rounds.steps_done, rounds.n_steps, rounds.workflow)
SELECT done.round_id, done.step_index, done.job_id, counted.steps_done, counted.n_steps, counted.workflow
FROM done LEFT OUTER JOIN counted ON true;
UPDATE steps SET pending_deps = steps.pending_deps - 1,
  status = CASE WHEN (steps.pending_deps = 1 AND steps.status = 'pending') THEN 'ready' ELSE steps.status END,
  ready_at = CASE WHEN (steps.pending_deps = 1 AND steps.status = 'pending') THEN now() ELSE steps.ready_at END
WHERE steps.round_id = :round AND steps.step_index = ANY (ARRAY[2]) RETURNING steps.id, steps.pending_deps, steps.status;
UPDATE jobs SET prompt_tokens = jobs.prompt_tokens + 10, completion_tokens = jobs.completion_tokens + 6,
  cost_usd = jobs.cost_usd + 0.0, cache_hits = jobs.cache_hits + 0, cached_tokens = jobs.cached_tokens + 0,
  saved_usd = jobs.saved_usd + 0.0
WHERE jobs.id = :job;
COMMIT;
BEGIN;
WITH done AS (UPDATE steps SET status = 'done', output = 'beta did <part B>', model = 'openai/scripted-worker-beta',
    prompt_tokens = 10, completion_tokens = 6, cost_usd = 0.0, latency_s = 0.001, lease_until = NULL, finished_at = now()
  WHERE steps.id = :s1 AND steps.status IN ('running', 'delegated') RETURNING steps.round_id, steps.step_index, steps.job_id),
counted AS (UPDATE rounds SET steps_done = rounds.steps_done + 1 FROM done
  WHERE rounds.id = done.round_id AND rounds.status = 'running' RETURNING rounds.steps_done, rounds.n_steps, rounds.workflow)
SELECT done.round_id, done.step_index, done.job_id, counted.steps_done, counted.n_steps, counted.workflow
FROM done LEFT OUTER JOIN counted ON true;
UPDATE steps SET pending_deps = steps.pending_deps - 1,
  status = CASE WHEN (steps.pending_deps = 1 AND steps.status = 'pending') THEN 'ready' ELSE steps.status END,
  ready_at = CASE WHEN (steps.pending_deps = 1 AND steps.status = 'pending') THEN now() ELSE steps.ready_at END
WHERE steps.round_id = :round AND steps.step_index = ANY (ARRAY[2]) RETURNING steps.id, steps.pending_deps, steps.status;
UPDATE jobs SET prompt_tokens = jobs.prompt_tokens + 10, completion_tokens = jobs.completion_tokens + 6,
  cost_usd = jobs.cost_usd + 0.0, cache_hits = jobs.cache_hits + 0, cached_tokens = jobs.cached_tokens + 0,
  saved_usd = jobs.saved_usd + 0.0
WHERE jobs.id = :job;
COMMIT;

-- the combine step: lease and reserve, read what it may see, then complete it and close the round,
-- the chain and the job
BEGIN;
WITH leased AS (UPDATE steps SET status = 'running', attempts = steps.attempts + 1, lease_holder = 'pgbench',
    lease_until = now() + interval '11 minutes', started_at = now() FROM rounds, chains
  WHERE steps.id = :s2 AND (steps.status = 'ready' OR steps.status = 'running' AND steps.lease_until < now())
    AND rounds.id = steps.round_id AND chains.id = rounds.chain_id
  RETURNING steps.round_id, steps.job_id, steps.step_index, steps.worker_index, steps.worker_name, steps.subtask,
    steps.access, steps.dependencies, rounds.status AS round_status, rounds.kind AS round_kind, rounds.chain_id,
    rounds.round_index, rounds.n_steps, chains.depth, chains.question),
reserved AS (UPDATE jobs SET model_calls = jobs.model_calls + 1 FROM leased
  WHERE jobs.id = leased.job_id AND jobs.model_calls < 40
    AND (jobs.budget_tokens IS NULL OR jobs.prompt_tokens + jobs.completion_tokens < jobs.budget_tokens)
    AND (jobs.budget_usd IS NULL OR jobs.cost_usd < jobs.budget_usd) AND leased.round_status = 'running'
    AND NOT (leased.worker_index = -1 AND leased.depth < 2) RETURNING jobs.id)
SELECT leased.*, EXISTS (SELECT reserved.id FROM reserved) AS reserved FROM leased;
SELECT steps.step_index, steps.subtask, steps.output FROM steps WHERE steps.round_id = :round AND steps.step_index = ANY (ARRAY[0, 1]);
SELECT jobs.options FROM jobs WHERE jobs.id = :job;
COMMIT;
BEGIN;
WITH done AS (UPDATE steps SET status = 'done', output = 'alpha did <combine>', model = 'openai/scripted-worker-alpha',
    prompt_tokens = 30, completion_tokens = 6, cost_usd = 0.0, latency_s = 0.001, lease_until = NULL, finished_at = now()
  WHERE steps.id = :s2 AND steps.status IN ('running', 'delegated') RETURNING steps.round_id, steps.step_index, steps.job_id),
counted AS (UPDATE rounds SET steps_done = rounds.steps_done + 1 FROM done
  WHERE rounds.id = done.round_id AND rounds.status = 'running' RETURNING rounds.steps_done, rounds.n_steps, rounds.workflow)
SELECT done.round_id, done.step_index, done.job_id, counted.steps_done, counted.n_steps, counted.workflow
FROM done LEFT OUTER JOIN counted ON true;
UPDATE rounds SET status = 'done', answer = 'alpha did <combine>', finished_at = now() WHERE rounds.id = :round
RETURNING rounds.kind, rounds.chain_id;
UPDATE chains SET status = 'done', answer = 'alpha did <combine>', error = NULL, finished_at = now()
WHERE chains.id = :chain AND chains.status = 'running' RETURNING chains.parent_step_id, chains.job_id;
UPDATE jobs SET open_chains = jobs.open_chains - 1 WHERE jobs.id = :job RETURNING jobs.open_chains;
UPDATE jobs SET prompt_tokens = jobs.prompt_tokens + 30, completion_tokens = jobs.completion_tokens + 6,
  cost_usd = jobs.cost_usd + 0.0, cache_hits = jobs.cache_hits + 0, cached_tokens = jobs.cached_tokens + 0,
  saved_usd = jobs.saved_usd + 0.0
WHERE jobs.id = :job;
COMMIT;
BEGIN;
SELECT jobs.* FROM jobs WHERE jobs.id = :job;
SELECT chains.* FROM chains WHERE chains.job_id = :job ORDER BY chains.id;
UPDATE jobs SET status = 'done', answer = 'alpha did <combine>', answer_chain_id = :chain, error = NULL, sent_at = NULL,
  sends = 0, finished_at = now()
WHERE jobs.id = :job AND jobs.status = 'running';
COMMIT;

-- after the final commit: does anyone want a webhook
BEGIN;
SELECT jobs.webhook_url, tenants.webhook_url AS webhook_url_1 FROM jobs LEFT OUTER JOIN tenants ON tenants.id = jobs.tenant_id
WHERE jobs.id = :job;
COMMIT;
