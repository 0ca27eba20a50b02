-- wrk script: POSTs unique, valid registrations (docs/api.md) and counts the
-- answers that are not 200. Used against both the service and the yardstick,
-- so the client does the same work for each.
--
-- Environment: BENCH_STORE_ID, BENCH_API_KEY, BENCH_REDIRECT_PORT (the
-- service's port, for redirect_uri) and BENCH_RUN (a nonce, so that a second
-- run against the same service never repeats a code still live from the first).

local store_id = os.getenv("BENCH_STORE_ID") or "7c9e6679-7425-40de-944b-e07fc1f90ae7"
local api_key = os.getenv("BENCH_API_KEY") or "ak_demo_not_secret_do_not_deploy"
local port = os.getenv("BENCH_REDIRECT_PORT") or "8080"
local run = os.getenv("BENCH_RUN") or tostring(os.time())

local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

-- Per-thread state (each wrk thread has its own Lua state).
local prefix, body_tail
local counter = 0
non200 = 0
statuses = ""

function init(args)
  math.randomseed(os.time() * 1000 + id)
  -- auth_code: run nonce, thread id, a random word, then a counter:
  -- always ≥ 16 characters of A-Z a-z 0-9 - . _ ~
  prefix = string.format('{"auth_code":"wrk-%s-%d-%08x-', run, id, math.random(0, 0x7fffffff))
  body_tail = '","redirect_uri":"http://127.0.0.1:' .. port .. '/stores/' .. store_id .. '/auth/callback",'
    .. '"client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301",'
    .. '"code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"af0ifjsldkj",'
    .. '"first_name":"Ada","last_name":"Lovelace","language":"en-GB","currency":"EUR","country":"GB",'
    .. '"timezone":"Europe/London"}'
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["X-API-Key"] = api_key
end

function request()
  counter = counter + 1
  return wrk.format(nil, nil, nil, prefix .. string.format("%010d", counter) .. body_tail)
end

local seen = {}
function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    if not seen[status] then
      seen[status] = true
      statuses = statuses .. " " .. status .. ":" .. (body or ""):sub(1, 200)
    end
  end
end

function done(summary, latency, requests)
  local total, detail = 0, ""
  for _, t in ipairs(threads) do
    total = total + (t:get("non200") or 0)
    local s = t:get("statuses")
    if s and s ~= "" then detail = detail .. s end
  end
  io.write(string.format("non-200: %d\n", total))
  if detail ~= "" then io.write("non-200 samples:" .. detail .. "\n") end
end
