-- wrk script: POST a KServe v2 JSON inference request and print a machine-readable summary.
-- usage: wrk -s deploy/tests/infer.lua URL/v2/models/NAME/infer -- [INPUT [SHAPE [DATATYPE]]]
--        wrk -s deploy/tests/infer.lua URL/v2/models/NAME/infer -- @BODY.json
-- INPUT defaults to "image", SHAPE to "1x3x16x16" (examples/models/tiny_cnn.onnx), DATATYPE to
-- FP32; the data are fixed pseudo-random values in [0, 1). "@FILE" posts FILE's bytes instead.
-- The last line printed is "wrk-json {...}": requests, duration_s, rps, p50_ms, p90_ms, p99_ms,
-- max_ms, non2xx (responses outside 200-399) and the socket errors (connect, read, write,
-- timeout); "lost" is non2xx plus every socket error, the requests that did not get an answer.

local function make_body(name, shape, dtype)
  local dims, n = {}, 1
  for d in string.gmatch(shape, "%d+") do
    dims[#dims + 1] = d
    n = n * tonumber(d)
  end
  local vals, x = {}, 12345
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    vals[i] = string.format("%.4f", x / 2147483648)
  end
  return string.format('{"id":"wrk","inputs":[{"name":"%s","shape":[%s],"datatype":"%s","data":[%s]}]}',
                       name, table.concat(dims, ","), dtype, table.concat(vals, ","))
end

local function read_file(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. path)
  local s = f:read("*a")
  f:close()
  return s
end

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function init(args)
  local a1 = args[1] or "image"
  if string.sub(a1, 1, 1) == "@" then
    wrk.body = read_file(string.sub(a1, 2))
  else
    wrk.body = make_body(a1, args[2] or "1x3x16x16", args[3] or "FP32")
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  local socket = e.connect + e.read + e.write + e.timeout
  io.write(string.format(
    'wrk-json {"requests":%d,"duration_s":%.3f,"rps":%.1f,"p50_ms":%.3f,"p90_ms":%.3f,' ..
    '"p99_ms":%.3f,"max_ms":%.3f,"non2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"lost":%d}\n',
    summary.requests, secs, summary.requests / secs, latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.status, e.connect, e.read, e.write, e.timeout, e.status + socket))
end
