"""Tenants: a tenants file refused in one line naming the field, and entitlements by guarantee, then weighted
water-filling of what is idle, with decayed usage making a heavy borrower yield."""

from __future__ import annotations

import numpy as np
import pytest

from pollux.cluster import Cluster, NodeGroup
from pollux.errors import SpecError
from pollux.tenants import Tenant, Tenants, UsageLedger, budgets, entitlements, read_tenants

TYPED = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8)])  # 8 aws, 8 rtx


@pytest.mark.parametrize(
    "body,field",
    [
        ('[[tenant]]\nname = "a"\nguaranteed = { aws = 9 }\n', "guaranteed.aws"),
        ('[[tenant]]\nname = "a"\nguaranteed = { v100 = 2 }\n', "guaranteed.v100"),
        ('[[tenant]]\nname = "a"\nmax = { v100 = 2 }\n', "max.v100"),
        ('[[tenant]]\nname = "a"\nweight = 0\n', "weight"),
        ('[[tenant]]\nname = "a"\nweight = -1.5\n', "weight"),
        ('[[tenant]]\nname = "a"\n[[tenant]]\nname = "a"\n', "'a' appears twice"),
        ('[[tenant]]\nname = "a"\nquota = 3\n', "'quota'"),
        ('[[tenant]]\nname = "a"\nguaranteed = { aws = 6 }\n[[tenant]]\nname = "b"\nguaranteed = { aws = 6 }\n', "aws"),
    ],
)
def test_a_bad_tenants_file_is_refused_in_one_line_naming_the_field(tmp_path, body, field):
    path = tmp_path / "tenants.toml"
    path.write_text(body)
    with pytest.raises(SpecError) as error:
        read_tenants(path, TYPED)
    message = str(error.value)
    assert field in message and str(path) in message
    assert "\n" not in message


def test_a_good_file_reads_with_its_guarantees_caps_and_file_order(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text(
        '[[tenant]]\nname = "vision"\nweight = 2\nguaranteed = { aws = 4, rtx = 2 }\nmax = { rtx = 6 }\n'
        '[[tenant]]\nname = "nlp"\nborrow = false\nguaranteed = { aws = 4 }\n'
    )
    tenants = read_tenants(path, TYPED)
    assert tenants.names == ("vision", "nlp")
    vision, nlp = tenants.tenants
    assert vision.weight == 2.0 and vision.guarantee_on("rtx") == 2 and vision.cap_on("rtx", 8) == 6
    assert nlp.cap_on("aws", 8) == 4  # no borrowing: its guarantee is its cap


def test_a_tenant_is_entitled_to_its_guarantee_where_its_demand_reaches_it():
    tenants = Tenants((Tenant("small", guaranteed={"aws": 6}), Tenant("heavy", weight=10.0)))
    entitled = entitlements(tenants, {"small": {"aws": 6.0}, "heavy": {"aws": 100.0}}, {"aws": 16})
    assert entitled["small"]["aws"] == 6.0 and entitled["heavy"]["aws"] == 10.0
    less = entitlements(tenants, {"small": {"aws": 2.0}, "heavy": {"aws": 100.0}}, {"aws": 16})
    assert less["small"]["aws"] == 2.0 and less["heavy"]["aws"] == 14.0  # what it cannot use goes to the other


def test_what_others_leave_idle_is_shared_by_weight_up_to_what_each_can_use():
    tenants = Tenants((Tenant("one"), Tenant("three", weight=3.0), Tenant("capped", weight=4.0)))
    demand = {"one": {"aws": 100.0}, "three": {"aws": 100.0}, "capped": {"aws": 2.0}}
    entitled = entitlements(tenants, demand, {"aws": 18})
    assert entitled["capped"]["aws"] == pytest.approx(2.0)
    assert entitled["one"]["aws"] == pytest.approx(4.0) and entitled["three"]["aws"] == pytest.approx(12.0)


def test_a_tenant_that_borrowed_much_yields_first():
    tenants = Tenants((Tenant("borrower"), Tenant("frugal")), usage_half_life_s=3600.0)
    ledger = UsageLedger(3600.0)
    ledger.record({}, 0.0)
    ledger.record({"borrower": 15, "frugal": 1}, 7200.0)
    factors = ledger.fair_share_factors(tenants)
    assert factors["borrower"] < 0.5 < factors["frugal"] <= 1.0
    demand = {"borrower": {"aws": 16.0}, "frugal": {"aws": 16.0}}
    entitled = entitlements(tenants, demand, {"aws": 16}, factors=factors)
    assert entitled["frugal"]["aws"] > 8.0 > entitled["borrower"]["aws"]
    ledger.record({"frugal": 16}, 7200.0 + 4 * 3600.0)  # then the other borrows more: the balance turns
    turned = ledger.fair_share_factors(tenants)
    assert turned["frugal"] < turned["borrower"]


def test_budgets_never_exceed_a_types_capacity_nor_fall_below_the_guarantee_a_demand_reaches():
    rng = np.random.default_rng(29)
    capacity = {"aws": 8, "rtx": 8}
    for _ in range(300):
        count = int(rng.integers(1, 5))
        guarantees = [{t: int(rng.integers(0, 3)) for t in capacity} for _ in range(count)]
        tenants = Tenants(
            tuple(
                Tenant(f"t{i}", float(rng.uniform(0.1, 4)), g, borrow=bool(rng.random() < 0.8))
                for i, g in enumerate(guarantees)
            )
        )
        demand = {name: {t: float(rng.integers(0, 12)) for t in capacity} for name in tenants.names}
        factors = {name: float(rng.uniform(0.01, 1.0)) for name in tenants.names}
        entitled = entitlements(tenants, demand, capacity, factors=factors)
        given = budgets(entitled, capacity)
        for gpu_type, cap in capacity.items():
            assert sum(given[name][gpu_type] for name in tenants.names) <= cap
            for tenant in tenants.tenants:
                reachable = min(tenant.guarantee_on(gpu_type), demand[tenant.name][gpu_type])
                assert entitled[tenant.name][gpu_type] >= reachable - 1e-9
                assert given[tenant.name][gpu_type] >= int(reachable)
