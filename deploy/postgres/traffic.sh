#!/bin/sh
# traffic.sh — the demo traffic of `sluice dev` as a psql loop, for compose
# (the `traffic` service). One transaction per step, about RATE per second,
# tenants t001..t300 skewed towards the low numbers: inserts, updates and
# deletes of orders, event inserts, a row moving between tenants, and the odd
# 2000-row transaction. Needs PGHOST, PGUSER, PGPASSWORD, PGDATABASE.
# MAX_TX > 0 stops after that many transactions (tests); 0 runs forever.
set -u
RATE="${RATE:-20}"
MAX_TX="${MAX_TX:-0}"
TENANTS="${TENANTS:-300}"
pause=$(awk "BEGIN { printf \"%.3f\", 1 / $RATE }")

until pg_isready -q; do sleep 1; done

n=0
while [ "$MAX_TX" -eq 0 ] || [ "$n" -lt "$MAX_TX" ]; do
	n=$((n + 1))
	# Skew: the square of a uniform number favours low tenant numbers.
	r=$(awk -v s="$n" 'BEGIN { srand(s); printf "%d %d %d", rand()*100, (rand()^2)*'"$TENANTS"' + 1, rand()*'"$TENANTS"' + 1 }')
	set -- $r
	op=$1
	t=$(printf 't%03d' "$2")
	other=$(printf 't%03d' "$3")
	if [ "$op" -lt 40 ]; then
		sql="INSERT INTO public.orders (tenant_id, id, customer_id, status, total, items, tags)
		     SELECT '$t', coalesce(max(id), 0) + 1, 1, 'placed', (random()*500)::numeric(12,2), jsonb_build_object('sku', 'B', 'qty', 1 + floor(random()*9)::int), ARRAY['new']
		     FROM public.orders WHERE tenant_id = '$t'"
	elif [ "$op" -lt 65 ]; then
		sql="UPDATE public.orders SET status = (ARRAY['paid','shipped','delivered'])[1 + floor(random()*3)::int], tags = tags || 'touched'::text
		     WHERE tenant_id = '$t' AND id = (SELECT id FROM public.orders WHERE tenant_id = '$t' ORDER BY random() LIMIT 1)"
	elif [ "$op" -lt 75 ]; then
		sql="DELETE FROM public.orders WHERE tenant_id = '$t' AND id = (SELECT id FROM public.orders WHERE tenant_id = '$t' ORDER BY random() LIMIT 1)"
	elif [ "$op" -lt 95 ]; then
		sql="INSERT INTO public.events (tenant_id, kind, payload) VALUES ('$t', 'click', jsonb_build_object('n', floor(random()*1000)::int))"
	elif [ "$op" -lt 98 ]; then
		sql="UPDATE public.events SET tenant_id = '$other' WHERE id = (SELECT id FROM public.events WHERE tenant_id = '$t' ORDER BY id DESC LIMIT 1)"
	else
		sql="INSERT INTO public.events (tenant_id, kind, payload) SELECT '$t', 'bulk', jsonb_build_object('i', g) FROM generate_series(1, 2000) g"
	fi
	psql -q -v ON_ERROR_STOP=1 -c "$sql" >/dev/null || echo "traffic: transaction $n failed" >&2
	sleep "$pause"
done
