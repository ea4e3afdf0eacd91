"""The Lua scripts that make quota admission atomic in Redis.

Every check and every increment of one admission runs inside one script, so concurrent
admissions cannot both see room that only one of them may take (no overshoot). Time is
Redis' own clock (`TIME`), so web nodes with skewed clocks share the same windows.

Admission hash fields: `w|<metric>|<counter key>` -> amount reserved in that window
counter; `s|<slot set key>` -> 1 for a concurrency slot held by this admission.
"""

from __future__ import annotations

# KEYS: admission hash, n window-counter bases, m slot sets.
# ARGV: admission id, n, m, lease seconds, admission ttl, then per counter (limit, amount,
# window seconds, metric), then per slot set its limit.
# Reply: {failed check index or 0, then per check: used (after admitting), seconds to reset}.
ADMIT = """
local id = ARGV[1]
local n, m = tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, admission_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local keys, used, resets = {}, {}, {}
local failed = 0
for i = 1, n do
  local at = 5 + (i - 1) * 4
  local limit, amount, window = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local index = math.floor(now / window)
  keys[i] = KEYS[1 + i] .. ':' .. index
  used[i] = tonumber(redis.call('GET', keys[i]) or '0')
  resets[i] = (index + 1) * window - now
  if failed == 0 and amount > 0 and used[i] + amount > limit then failed = i end
end
local slot_limits = 5 + n * 4
for j = 1, m do
  local slots = KEYS[1 + n + j]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  used[n + j] = redis.call('ZCARD', slots)
  resets[n + j] = 1
  if failed == 0 and used[n + j] + 1 > tonumber(ARGV[slot_limits + j]) then failed = n + j end
end
if failed == 0 then
  for i = 1, n do
    local at = 5 + (i - 1) * 4
    local amount, window, metric = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), ARGV[at + 4]
    if amount > 0 then
      used[i] = tonumber(redis.call('INCRBYFLOAT', keys[i], amount))
      if redis.call('TTL', keys[i]) < 0 then redis.call('EXPIRE', keys[i], math.ceil(window + 60)) end
      redis.call('HINCRBYFLOAT', KEYS[1], 'w|' .. metric .. '|' .. keys[i], amount)
    end
  end
  for j = 1, m do
    local slots = KEYS[1 + n + j]
    redis.call('ZADD', slots, now + lease, id)
    redis.call('EXPIRE', slots, math.ceil(lease * 2))
    used[n + j] = used[n + j] + 1
    redis.call('HSET', KEYS[1], 's|' .. slots, 1)
  end
  redis.call('EXPIRE', KEYS[1], admission_ttl)
end
local reply = {failed}
for k = 1, n + m do
  reply[#reply + 1] = tostring(used[k])
  reply[#reply + 1] = tostring(resets[k])
end
return reply
"""

# KEYS: admission hash. ARGV: admission id, then (metric, actual amount) pairs.
# Moves each window counter from the reserved amount to the actual one (only while that
# window still exists: a finished window is not charged again), frees the slots and
# forgets the admission. Reply: 1, or 0 if the admission was already settled or expired.
SETTLE = """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return 0 end
local actual = {}
for i = 2, #ARGV, 2 do actual[ARGV[i]] = tonumber(ARGV[i + 1]) end
for i = 1, #fields, 2 do
  local field, reserved = fields[i], tonumber(fields[i + 1])
  local kind, rest = string.sub(field, 1, 1), string.sub(field, 3)
  if kind == 'w' then
    local bar = string.find(rest, '|', 1, true)
    local metric, counter = string.sub(rest, 1, bar - 1), string.sub(rest, bar + 1)
    local delta = (actual[metric] or 0) - reserved
    if delta ~= 0 and redis.call('EXISTS', counter) == 1 then
      if tonumber(redis.call('INCRBYFLOAT', counter, delta)) < 0 then redis.call('SET', counter, 0, 'KEEPTTL') end
    end
  else
    redis.call('ZREM', rest, ARGV[1])
  end
end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: admission hash. ARGV: admission id. Frees the concurrency slots only.
RELEASE = """
local fields = redis.call('HKEYS', KEYS[1])
local freed = 0
for _, field in ipairs(fields) do
  if string.sub(field, 1, 2) == 's|' then
    freed = freed + redis.call('ZREM', string.sub(field, 3), ARGV[1])
    redis.call('HDEL', KEYS[1], field)
  end
end
return freed
"""

# KEYS: admission hash. ARGV: admission id, lease seconds, admission ttl. Extends the
# slot leases of a long request. Reply: number of slots still held.
RENEW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local lease = tonumber(ARGV[2])
local held = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, 1, 2) == 's|' then
    local slots = string.sub(field, 3)
    if redis.call('ZSCORE', slots, ARGV[1]) then
      redis.call('ZADD', slots, 'XX', now + lease, ARGV[1])
      held = held + 1
    end
    redis.call('EXPIRE', slots, math.ceil(lease * 2))
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3])) end
return held
"""
